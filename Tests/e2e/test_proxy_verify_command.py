"""`pinproxy run` with `verify_command`: the operator's own check, in the daemon.

After the built-in checks pass, the daemon runs the command off its event loops with the
verified chain on stdin: exit 0 lets the tunnel open, anything else (or no answer within
verify_command_timeout) refuses `custom-check` with the command's first stderr line. A command
that does not answer in time is killed with its whole process group, whatever it did with its
descriptors, and its slot is free at once. Exit statuses (never a timeout, a kill or a failure to
start) are cached per (entry, chain, host, port, command) for verify_command_cache seconds, and a
reload forgets them all. While a slow command runs, other clients are served. `enforce = false`
makes its refusal report-only.
"""

from __future__ import annotations

import stat
import threading
import time
from pathlib import Path

import pytest

import origin as originlib
from proxy_harness import (
    API,
    TIMEOUT,
    Tunnel,
    connect,
    expect_refusal,
    make_proxy,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    poll,
)

CHECKER = """#!/bin/sh
d="$(dirname "$0")"
echo "$PINPROXY_HOST $PINPROXY_PORT $(grep -c 'BEGIN CERTIFICATE')" >> "$d/calls.txt"
case "$1" in
  pass) exit 0 ;;
  fail) echo "refused by the test's own check" >&2; exit 2 ;;
  slow) sleep 30 ;;
esac
exit 9
"""


# Writes its stderr to a file, closes stdout and hangs: only a kill of its process group ends it.
HUNG = """#!/bin/sh
d="$(dirname "$0")"
exec 2>>"$d/hung.err"
exec >&-
echo $$ > "$d/hung.pgid"
sleep 1000
"""

# Fails as $1 says the first time it runs (no exit status of its own), then allows.
FAILS_ONCE = """#!/bin/sh
d="$(dirname "$0")"
echo "$1" >> "$d/calls.txt"
if [ ! -e "$d/failed-once" ]; then
  : > "$d/failed-once"
  case "$1" in
    hang) sleep 1000 ;;
    kill) kill -9 $$ ;;
  esac
fi
exit 0
"""


def script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def live_processes_in_group(pgid: int) -> list[int]:
    """Processes of process group PGID that still run. A zombie is dead: where pid 1 does not reap
    orphans (some containers), the killed shell's `sleep` stays one."""
    found = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(stat_file.parent.name))
    return found


def daemon(make_proxy, origins, pki, tmp_path, mode: str, proxy_keys=None, text: str = CHECKER, **entry_keys):
    checker = script(tmp_path, "checker.sh", text)
    entry = {"trust": ["root-a.pem"], "pin": "public-key", "pins": [pki.spki("int-a"), pki.spki("root-a")],
             "verify_command": [str(checker), mode], **entry_keys}
    keys = {"allow_ports": [origins.api.port, origins.other.port], "verify_command_timeout": 1}
    keys.update(proxy_keys or {})
    p = make_proxy(proxy=keys, resolve={API: "127.0.0.1", "other.test": "127.0.0.1"},
                   hosts={API: entry, "other.test": {"trust": ["root-a.pem"]}})
    return p, tmp_path / "calls.txt"


def calls(path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_passing_check_opens_the_tunnel_and_its_answer_is_cached(make_proxy, origins, pki, tmp_path):
    p, log = daemon(make_proxy, origins, pki, tmp_path, "pass")
    for _ in range(2):
        with Tunnel(p, API, origins.api.port) as t:
            assert t.get("/small") == (200, originlib.SMALL_BODY)
    assert calls(log) == [f"{API} {origins.api.port} 3"], calls(log)  # leaf, intermediate, root; once


def test_no_cache_runs_it_every_time(make_proxy, origins, pki, tmp_path):
    p, log = daemon(make_proxy, origins, pki, tmp_path, "pass", proxy_keys={"verify_command_cache": 0})
    for _ in range(2):
        with Tunnel(p, API, origins.api.port) as t:
            assert t.get("/small")[0] == 200
    assert len(calls(log)) == 2, calls(log)


def test_a_failing_check_refuses_custom_check(make_proxy, origins, pki, tmp_path):
    p, _ = daemon(make_proxy, origins, pki, tmp_path, "fail")
    answer, line = expect_refusal(p, API, origins.api.port, "custom-check")
    assert answer.status == 403
    assert "refused by the test's own check" in line.get("detail", ""), line.raw
    assert pki.spki("api") in line.get("chain", ""), line.raw


def test_a_slow_check_refuses_without_holding_up_other_clients(make_proxy, origins, pki, tmp_path):
    p, _ = daemon(make_proxy, origins, pki, tmp_path, "slow", proxy_keys={"verify_command_timeout": 3})
    result = {}

    def slow():
        result["answer"] = connect(p.port, API, origins.api.port, timeout=TIMEOUT)

    thread = threading.Thread(target=slow)
    thread.start()
    poll(lambda: (tmp_path / "calls.txt").exists(), what="the slow check to start")
    started = time.monotonic()
    with Tunnel(p, "other.test", origins.other.port) as t:  # served while the check runs
        assert t.get("/small")[0] == 200
    assert time.monotonic() - started < 2.5, "another client waited for the slow check"
    thread.join(TIMEOUT)
    answer = result["answer"].answer
    assert answer.status == 403 and answer.refusal == "custom-check", answer
    line = p.connection_log(result["answer"].client_port)
    assert "did not answer within 3s" in line.get("detail", ""), line.raw


def test_report_only_lets_it_through_and_says_so(make_proxy, origins, pki, tmp_path):
    p, _ = daemon(make_proxy, origins, pki, tmp_path, "fail", enforce=False)
    c = connect(p.port, API, origins.api.port)
    try:
        assert c.answer.status == 200, c.answer
        assert c.answer.headers.get("pinproxy-verdict") == "would-refuse custom-check", c.answer
    finally:
        c.close()
    line = p.connection_log(c.client_port)
    assert line.get("outcome") == "report-only" and line.get("reason") == "custom-check", line.raw


def test_a_command_that_closes_its_output_and_hangs_is_killed_with_its_group(make_proxy, origins, pki, tmp_path):
    hung = script(tmp_path, "hung.sh", HUNG)
    checker = script(tmp_path, "checker.sh", CHECKER)
    p = make_proxy(proxy={"allow_ports": [origins.api.port, origins.other.port],
                          "verify_command_timeout": 2, "verify_command_concurrency": 1},
                   resolve={API: "127.0.0.1", "other.test": "127.0.0.1"},
                   hosts={API: {"trust": ["root-a.pem"], "verify_command": [str(hung)]},
                          "other.test": {"trust": ["root-a.pem"], "verify_command": [str(checker), "pass"]}})
    started = time.monotonic()
    c = connect(p.port, API, origins.api.port)
    took = time.monotonic() - started
    assert c.answer.status == 403 and c.answer.refusal == "custom-check", c.answer
    assert took < 3, f"refused after {took:.1f}s, with verify_command_timeout = 2"
    line = p.connection_log(c.client_port)
    assert "timed out" in line.get("detail", ""), line.raw
    # The only slot is free: another host's check runs and allows.
    with Tunnel(p, "other.test", origins.other.port) as t:
        assert t.get("/small")[0] == 200
    assert calls(tmp_path / "calls.txt") == [f"other.test {origins.other.port} 3"]
    pgid = int((tmp_path / "hung.pgid").read_text())
    poll(lambda: not live_processes_in_group(pgid), what=f"the hung command's process group {pgid} to be gone")


@pytest.mark.parametrize("change", ["nothing in the config", "cache 0", "the command"])
def test_a_reload_forgets_cached_answers(make_proxy, origins, pki, tmp_path, change):
    p, log = daemon(make_proxy, origins, pki, tmp_path, "pass")
    with Tunnel(p, API, origins.api.port) as t:  # allowed, and cached for 300 s
        assert t.get("/small")[0] == 200
    if change == "the command":
        p.hosts[API]["verify_command"] = ["/bin/sh", "-c", "echo now refusing >&2; exit 1"]
    else:  # the same command now refuses
        (tmp_path / "checker.sh").write_text(CHECKER.replace("pass) exit 0", "pass) echo now refusing >&2; exit 1"))
    if change == "cache 0":
        p.proxy_keys["verify_command_cache"] = 0
    p.write_config()
    assert p.reload().get("outcome") == "ok"
    _, line = expect_refusal(p, API, origins.api.port, "custom-check")
    assert "now refusing" in line.get("detail", ""), line.raw


@pytest.mark.parametrize("failure", ["hang", "kill", "unstartable"])
def test_only_exit_statuses_are_cached(make_proxy, origins, pki, tmp_path, failure):
    p, log = daemon(make_proxy, origins, pki, tmp_path, failure, text=FAILS_ONCE)
    checker = tmp_path / "checker.sh"
    if failure == "unstartable":
        checker.chmod(0o600)
        (tmp_path / "failed-once").touch()
    _, line = expect_refusal(p, API, origins.api.port, "custom-check")
    checker.chmod(0o700)
    with Tunnel(p, API, origins.api.port) as t:  # the failure was not cached: the command runs again
        assert t.get("/small")[0] == 200
    assert len(calls(log)) == (1 if failure == "unstartable" else 2), calls(log)
    said = {"hang": "timed out", "kill": "was killed by signal 9", "unstartable": "cannot start"}[failure]
    assert said in line.get("detail", ""), line.raw
