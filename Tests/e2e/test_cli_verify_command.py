"""`verify_command`: an operator's own check after the built-in ones (offline: check, evaluate).

The command gets the verified chain (PEM, leaf first) on stdin and PINPROXY_HOST /
PINPROXY_PORT in its environment: exit 0 allows, anything else refuses `custom-check` with the
first line of its stderr in the detail. It only ever refuses more: after a built-in refusal it
never runs. A command that does not answer in time refuses. `enforce = false` makes its refusal
report-only. `check` rejects a command that is not an executable file. The daemon's side (off
the event loop, cached, bounded) is in test_proxy_verify_command.py.
"""

from __future__ import annotations

import os
import stat

from conftest import spki

CHECKER = """#!/bin/sh
# Records what it was given, then answers as told by $1.
cat > "$(dirname "$0")/stdin.pem"
printf '%s %s\\n' "$PINPROXY_HOST" "$PINPROXY_PORT" > "$(dirname "$0")/env.txt"
case "$1" in
  pass) exit 0 ;;
  fail) echo "not in the CT logs I trust" >&2; echo "second line" >&2; exit 3 ;;
  slow) sleep 30 ;;
esac
exit 9
"""


def checker(ws, name: str = "check-ct") -> str:
    path = ws.write(name, CHECKER)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def entry(command: list[str], **extra) -> str:
    keys = {"trust": '["root-a.pem"]', "pin": '"public-key"', "pins": f'["{spki("int-a")}", "{spki("root-a")}"]',
            "verify_command": "[" + ", ".join(f'"{c}"' for c in command) + "]", **extra}
    return '[hosts."api.test"]\n' + "".join(f"{k} = {v}\n" for k, v in keys.items())


def test_a_passing_command_allows_and_sees_the_verified_chain(ws, pki):
    cmd = checker(ws)
    cfg = ws.config(entry([cmd, "pass"]))
    r = ws.evaluate(cfg, "api.test", "api-chain.pem", port=443)
    assert r.code == 0 and r.first == "allow", r
    given = (ws.dir / "stdin.pem").read_text()
    assert given.count("BEGIN CERTIFICATE") == 3, given  # leaf, intermediate and the root it verified to
    assert given.startswith((ws.dir / "api.pem").read_text().strip()), "the leaf comes first"
    assert (ws.dir / "env.txt").read_text().split() == ["api.test", "443"]


def test_a_failing_command_refuses_custom_check_with_its_first_stderr_line(ws):
    cfg = ws.config(entry([checker(ws), "fail"]))
    r = ws.evaluate(cfg, "api.test", "api-chain.pem")
    assert r.code == 1 and r.first == "refuse: custom-check", r
    assert "custom-check:" in r.out and "exited with status 3: not in the CT logs I trust" in r.out, r
    assert "second line" not in r.out


def test_a_command_that_does_not_answer_in_time_refuses(ws):
    cfg = ws.config("[proxy]\nverify_command_timeout = 1\n\n" + entry([checker(ws), "slow"]))
    r = ws.evaluate(cfg, "api.test", "api-chain.pem")
    assert r.code == 1 and r.first == "refuse: custom-check", r
    assert "did not answer within 1s" in r.out, r


def test_it_never_runs_after_a_built_in_refusal(ws):
    cfg = ws.config(entry([checker(ws), "pass"]).replace(spki("int-a"), spki("int-b")).replace(spki("root-a"), spki("root-b")))
    r = ws.evaluate(cfg, "api.test", "api-chain.pem")
    assert r.code == 1 and r.first == "refuse: pin-mismatch", r
    assert not (ws.dir / "stdin.pem").exists(), "verify_command ran after a built-in refusal"


def test_report_only_covers_it(ws):
    cfg = ws.config(entry([checker(ws), "fail"], enforce="false"))
    r = ws.evaluate(cfg, "api.test", "api-chain.pem")
    assert r.code == 0 and r.first == "allow (would refuse: custom-check)", r


def test_check_rejects_a_command_that_is_not_an_executable_file(ws):
    plain = ws.write("not-executable.sh", "#!/bin/sh\nexit 0\n")
    os.chmod(plain, 0o644)
    for command, why in (([str(plain)], "is not an executable file"),
                         ([str(ws.dir / "missing")], "is not an executable file"),
                         ([str(ws.dir)], "is not an executable file"),
                         (["relative-missing"], "is not an executable file")):
        cfg = ws.config(entry(command))
        r = ws.check(cfg)
        assert r.code == 1, r
        lines = [l for l in r.err.splitlines() if why in l]
        assert lines and lines[0].startswith(f"{cfg}:"), r
    ok = ws.config(entry([checker(ws), "pass"]))
    assert ws.check(ok).code == 0


def test_proxy_keys_are_checked(ws):
    for text, message in (("verify_command_timeout = 0", "verify_command_timeout"),
                          ("verify_command_concurrency = 0", "verify_command_concurrency"),
                          ("verify_command_cache = -1", "verify_command_cache")):
        r = ws.check(ws.config(f"[proxy]\n{text}\n"))
        assert r.code == 1 and message in r.err and ":2:" in r.err, r
