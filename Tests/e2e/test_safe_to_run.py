"""Safe to run, easy to operate: `--version`; `ca --bundle`; `check` on a [resolve] entry that
block_private_destinations makes unreachable; `evaluate` without --config and its wording on an
unverified chain; a reload that changes restart-only settings (metrics_listen, the drain and admin
timeouts); and the connection limit derived from the open-file limit (no warning at a default
start)."""

from __future__ import annotations

import os
import re
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from conftest import AT, PIN_X, TIMEOUT, run, pkilib
from proxy_harness import REPO, Proxy, free_port, make_proxy, poll, proxy_factory  # noqa: F401 (fixture)


def run_env(pinproxy, *args, env=None, cwd=None):
    p = subprocess.run([str(pinproxy), *map(str, args)], capture_output=True, text=True, timeout=TIMEOUT,
                       stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})}, cwd=cwd)
    return p


# ---------------------------------------------------------------- --version


def test_version(pinproxy):
    p = run_env(pinproxy, "--version")
    assert p.returncode == 0, p
    # A plain swift build knows no commit; the build scripts give it one (scripts/build-info).
    assert re.fullmatch(r"pinproxy \d+\.\d+\.\d+ \((commit unknown|commit [0-9a-f]{7}(-dirty)?, \d{4}-\d{2}-\d{2})\)\n",
                        p.stdout), p.stdout


def build_info(repo, **env) -> str:
    """What scripts/build-info exports for REPO."""
    script = f'repo="{repo}"; . "{REPO}/scripts/build-info"; echo "${{PINPROXY_COMMIT:-}} ${{PINPROXY_COMMIT_DATE:-}}"'
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True, timeout=TIMEOUT,
                          env={**os.environ, **env}).stdout.strip()


def test_build_info_names_the_commit_and_its_date_or_nothing(tmp_path):
    env = {"SOURCE_DATE_EPOCH": ""}
    if shutil.which("git") and subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True).returncode == 0:
        commit, date = build_info(REPO, **env).split(" ")
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True).stdout.strip()
        assert commit in (head, f"{head}-dirty"), commit
        committed = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%cd", "--date=format-local:%Y-%m-%d"],
                                   capture_output=True, text=True, env={**os.environ, "TZ": "UTC"}).stdout.strip()
        assert date == committed, date
        # SOURCE_DATE_EPOCH sets the date, for a reproducible build.
        assert build_info(REPO, SOURCE_DATE_EPOCH="1798761600").split(" ")[1] == "2027-01-01"
    assert build_info(tmp_path) == "", "outside git: no commit and no date (the binary says commit unknown)"


# ---------------------------------------------------------------- ca --bundle


def test_ca_bundle_is_the_system_bundle_plus_the_ca(pinproxy, ws, tmp_path):
    cfg = ws.config(f'[proxy]\nca_dir = "{tmp_path / "ca"}"\n')
    env = {"SSL_CERT_FILE": str(ws.path("root-a.pem"))}  # stands in for the system bundle
    out = tmp_path / "bundle.pem"
    p = run_env(pinproxy, "ca", "--config", cfg, "--bundle", out, env=env)
    assert p.returncode == 0, p
    assert p.stdout == f"{out}\n", p.stdout
    ca_pem = (tmp_path / "ca" / "ca.pem").read_text()
    certs = pkilib.load_certs(out)
    assert [c.subject.rfc4514_string() for c in certs][0] == pkilib.load_certs(ws.path("root-a.pem"))[0].subject.rfc4514_string()
    assert len(certs) == 2 and ca_pem.strip() in out.read_text()
    # A client given the bundle trusts both: a host it reaches directly, and the pinproxy CA.
    ctx = ssl.create_default_context(cafile=str(out))
    assert len(ctx.get_ca_certs()) == 2
    # Again: replaced, not appended to; the CA is never listed twice.
    assert run_env(pinproxy, "ca", "--config", cfg, "--bundle", out, env=env).returncode == 0
    assert len(pkilib.load_certs(out)) == 2
    # "-" prints it.
    p = run_env(pinproxy, "ca", "--config", cfg, "--bundle", "-", env=env)
    assert p.returncode == 0 and p.stdout == out.read_text(), p


def test_ca_bundle_unreadable_system_bundle_is_an_error(pinproxy, ws, tmp_path):
    cfg = ws.config(f'[proxy]\nca_dir = "{tmp_path / "ca"}"\n')
    p = run_env(pinproxy, "ca", "--config", cfg, "--bundle", tmp_path / "b.pem", env={"SSL_CERT_FILE": str(tmp_path / "nope")})
    assert p.returncode == 1 and "system trust bundle" in p.stderr, p
    assert not (tmp_path / "b.pem").exists()


# ---------------------------------------------------------------- check: [resolve] and private destinations


def test_check_warns_when_resolve_points_at_a_blocked_private_address(ws):
    cfg = ws.config('[resolve]\n"api.test" = "127.0.0.1"\n"mixed.test" = ["10.1.2.3", "93.184.216.34"]\n"public.test" = "93.184.216.34"\n')
    res = ws.check(cfg)
    assert res.code == 0, res
    assert re.search(r'warning: resolve\."api\.test" .*127\.0\.0\.1.*block_private_destinations = true: every connection to api\.test is refused', res.out), res
    assert re.search(r'warning: resolve\."mixed\.test" .*10\.1\.2\.3', res.out), res
    assert "public.test" not in res.out.split("warnings:")[1], res
    assert "warnings: 2" in res.out, res


def test_check_no_private_resolve_warning_when_private_destinations_are_allowed(ws):
    cfg = ws.config('[proxy]\nblock_private_destinations = false\n[resolve]\n"api.test" = "127.0.0.1"\n')
    res = ws.check(cfg)
    assert res.code == 0 and "warnings: 0" in res.out, res


# ---------------------------------------------------------------- evaluate


def test_evaluate_defaults_to_the_built_in_config(pinproxy, ws):
    # The built-in default verifies every host against the system store: here, root-a.
    p = run_env(pinproxy, "evaluate", "--host", "api.test", "--chain", ws.path("api-chain.pem"), "--at", AT,
                env={"SSL_CERT_FILE": str(ws.path("root-a.pem"))})
    assert p.returncode == 0, p
    assert p.stdout.splitlines()[0] == "allow", p.stdout
    assert "entry: default" in p.stdout, p.stdout


def test_evaluate_untrusted_chain_does_not_claim_verified_or_matched(ws, pki):
    cfg = ws.config(f'[hosts."api.test"]\ntrust = ["root-b.pem"]\npin = "public-key"\npins = ["{pki.spki("api")}", "{PIN_X}"]\n')
    res = ws.evaluate(cfg, "api.test", "api-chain.pem")
    assert res.first == "refuse: untrusted-chain", res
    assert not re.search(r"^verified chain", res.out, re.M), res
    assert "matched" not in res.out, res
    assert "chain built, not verified (untrusted-chain)" in res.out, res
    assert "pins count only on a chain OpenSSL verified" in res.out, res
    # Verified: the usual words.
    cfg2 = ws.config(f'[hosts."api.test"]\ntrust = ["root-a.pem"]\npin = "public-key"\npins = ["{pki.spki("api")}", "{PIN_X}"]\n', name="ok.toml")
    res = ws.evaluate(cfg2, "api.test", "api-chain.pem")
    assert res.first == "allow" and "verified chain: " in res.out and " matched certificate [0]" in res.out, res


# ---------------------------------------------------------------- daemon: reload of restart-only settings


def test_reload_that_adds_metrics_listen_warns_it_needs_a_restart(make_proxy):
    p = make_proxy(proxy={"allow_ports": [443]})
    p.proxy_keys["metrics_listen"] = f"127.0.0.1:{free_port()}"
    p.write_config()
    mark = p.mark()
    line = p.reload()
    assert line.get("outcome") == "ok", line.raw
    warning = p.wait_for_log(lambda l: l.get("event") == "reload" and l.get("level") == "warning", since=mark,
                             what="a reload warning")
    assert "metrics_listen" in warning["detail"] and "next start" in warning["detail"], warning.raw


def test_reload_that_changes_drain_and_admin_timeouts_warns_they_need_a_restart(make_proxy):
    # The drain reads the start's drain_timeout, and the metrics server its admin_timeout.
    p = make_proxy(proxy={"allow_ports": [443], "metrics_listen": f"127.0.0.1:{free_port()}"})
    p.proxy_keys.update(drain_timeout=5, admin_timeout=3, workers=3, idle_timeout=30)
    p.write_config()
    mark = p.mark()
    line = p.reload()
    assert line.get("outcome") == "ok", line.raw
    warning = p.wait_for_log(lambda l: l.get("event") == "reload" and l.get("level") == "warning", since=mark,
                             what="a reload warning")
    assert warning["detail"] == ("workers, drain_timeout, admin_timeout changed: restart-only settings, "
                                 "they take effect at the next start"), warning.raw


# ---------------------------------------------------------------- daemon: connection limit


class LimitedProxy(Proxy):
    """A daemon whose open-file limit (soft and hard) is 512."""

    def argv(self):
        return ["prlimit", "--nofile=512:512", "--"] + super().argv()


@pytest.fixture
def make_limited(pinproxy, pki, tmp_path):
    yield from proxy_factory(LimitedProxy, pinproxy, pki, tmp_path)


def test_default_max_connections_follows_the_descriptor_limit(make_limited):
    p = make_limited(proxy={"allow_ports": [443]})
    p.wait_for_log(lambda l: l.get("event") == "started", what="event=started")
    assert not [l for l in p.logs() if l.get("event") == "connection-limit"], p.describe()


def test_an_unmeetable_max_connections_is_warned_about(make_limited):
    p = make_limited(proxy={"max_connections": 10000, "allow_ports": [443]})
    line = p.wait_for_log(lambda l: l.get("event") == "connection-limit", what="event=connection-limit")
    assert "max_connections = 10000" in line["detail"] and "(512)" in line["detail"], line.raw


# ---------------------------------------------------------------- pid_file and `pinproxy reload`


def test_reload_signals_the_daemon_of_the_pid_file(make_proxy, pinproxy):
    p = make_proxy(proxy={"allow_ports": [443], "pid_file": "pinproxy.pid"})
    pid_path = p.dir / "pinproxy.pid"
    poll(pid_path.exists, what="the pid file")
    assert int(pid_path.read_text()) == p.pid
    mark = p.mark()
    r = run(pinproxy, "reload", "--config", p.config_path)
    assert r.code == 0 and f"pid {p.pid}" in r.out, r
    line = p.wait_for_log(lambda l: l.get("event") == "reload", since=mark, what="event=reload")
    assert line.get("outcome") == "ok", line.raw
    # A broken config is never sent: the daemon keeps its policy and logs nothing.
    p.write_config(p.config_text + "\n[hosts.\"x.test\"]\npin = \"public-key\"\n")
    mark = p.mark()
    r = run(pinproxy, "reload", "--config", p.config_path)
    assert r.code == 1 and "not reloading" in r.err, r
    assert not [l for l in p.logs(mark) if l.get("event") == "reload"]
    # A second daemon on the same pid_file refuses to start; the first keeps its file.
    q = make_proxy(start=False, proxy={"allow_ports": [443], "pid_file": str(pid_path)})
    q.start(wait=False)
    assert q.wait_exit() == 1
    q._stopped = True  # its exit is what this test expects
    assert "another running pinproxy" in q.log_path.read_text()
    assert "event=started" not in q.log_path.read_text()
    assert int(pid_path.read_text()) == p.pid
    # At exit the file goes.
    assert p.stop() == 0
    assert not pid_path.exists()


def test_reload_without_pid_file_or_daemon_is_a_clear_error(ws, pinproxy, tmp_path):
    r = run(pinproxy, "reload", "--config", ws.config("[proxy]\n"))
    assert r.code == 1 and "pid_file" in r.err and "systemctl reload pinproxy" in r.err, r
    stale = tmp_path / "stale.pid"
    stale.write_text("1\n")  # pid 1 is not pinproxy
    r = run(pinproxy, "reload", "--config", ws.config(f'[proxy]\npid_file = "{stale}"\n', name="s.toml"))
    assert r.code == 1 and "not a running pinproxy" in r.err, r
