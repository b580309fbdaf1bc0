"""`pinproxy reload` says what the daemon said about this reload (issue 33): the daemon leaves
each SIGHUP's result (its warnings, or its errors) beside its pid_file, or in
$RUNTIME_DIRECTORY under systemd, and the command waits for the result of its own signal.
Exit 0: the new config is in force (its warnings printed); 3: in force, but restart-only
settings changed, which wait for the next start (0 with --restart-pending-ok, as the unit's
ExecReload= runs it); 1: the daemon kept its previous policy.
"""

from __future__ import annotations

import json
import subprocess

from conftest import TIMEOUT
from proxy_harness import free_port, make_proxy, poll  # noqa: F401 (fixture)


def reload(pinproxy, config, *args, env=None):
    return subprocess.run([str(pinproxy), "reload", "--config", str(config), *map(str, args)], capture_output=True,
                          text=True, timeout=TIMEOUT * 2, env=env)


def test_a_restart_only_change_is_said_by_reload_with_its_own_exit_status(make_proxy, pinproxy):
    """The case of issue 33: metrics_listen changed; the daemon keeps the old listener until a
    restart, and `pinproxy reload` says so instead of a plain ok."""
    first, second = free_port(), free_port()
    p = make_proxy(proxy={"allow_ports": [443], "pid_file": "pinproxy.pid", "metrics_listen": f"127.0.0.1:{first}"})
    poll((p.dir / "pinproxy.pid").exists, what="the pid file")
    r = reload(pinproxy, p.config_path)
    assert r.returncode == 0 and "the new policy is in force" in r.stdout and r.stderr == "", r
    p.proxy_keys["metrics_listen"] = f"127.0.0.1:{second}"
    p.write_config()
    r = reload(pinproxy, p.config_path)
    assert r.returncode == 3, r
    assert f"ok, with 1 warning(s); pinproxy (pid {p.pid}) has re-read it" in r.stdout, r
    assert f"{p.config_path}: warning: metrics_listen changed: restart-only settings, they take effect at the next start" in r.stderr, r
    r = reload(pinproxy, p.config_path, "--restart-pending-ok")
    assert r.returncode == 0 and "metrics_listen changed" in r.stderr, r
    # The config's warnings are the daemon's too: printed, and the reload is a success.
    p.hosts["insecure.test"] = {"action": "allow-insecure"}
    p.write_config()
    r = reload(pinproxy, p.config_path)
    assert r.returncode == 3 and 'has action = "allow-insecure"' in r.stderr, r  # metrics_listen still pending
    p.stop()
    p.start()
    # The port accepts before the daemon writes its pid file (once SIGHUP is handled).
    pid_file = p.dir / "pinproxy.pid"
    poll(lambda: pid_file.exists() and pid_file.read_text().strip() == str(p.pid), what="the new daemon's pid file")
    r = reload(pinproxy, p.config_path)
    assert r.returncode == 0 and "ok, with 1 warning(s)" in r.stdout, r
    assert f'{p.config_path}:' in r.stderr and 'has action = "allow-insecure"' in r.stderr, r
    assert "restart-only" not in r.stderr, r


def test_a_config_the_daemon_rejects_fails_reload_with_the_daemons_errors(make_proxy, pinproxy):
    """The command checks the config it is given, but the daemon re-reads its own: when that one
    is broken, the daemon's FILE:LINE errors and exit 1 are what reload reports."""
    p = make_proxy(proxy={"allow_ports": [443], "pid_file": "pinproxy.pid"})
    poll((p.dir / "pinproxy.pid").exists, what="the pid file")
    other = p.dir / "other.toml"
    other.write_text(p.config_text)
    p.write_config(p.config_text + '\n[hosts."x.test"]\npin = "public-key"\n')
    r = reload(pinproxy, other)
    assert r.returncode == 1, r
    assert f'{p.config_path}:' in r.stderr and 'pin = "public-key" but no pins' in r.stderr, r
    assert f"pinproxy (pid {p.pid}) rejected {p.config_path}" in r.stderr and "previous policy stays in force" in r.stderr, r
    p.assert_alive("after the rejected reload")


def test_execreload_channel_runtime_directory_and_mainpid(make_proxy, pinproxy, tmp_path, monkeypatch):
    """What systemd's ExecReload= runs: `--pid $MAINPID`, no pid_file, the result in
    $RUNTIME_DIRECTORY (RuntimeDirectory=pinproxy), keyed to the signal this command sent."""
    runtime = tmp_path / "run"
    runtime.mkdir()
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(runtime))
    p = make_proxy(proxy={"allow_ports": [443]})
    r = reload(pinproxy, p.config_path, "--pid", p.pid, "--restart-pending-ok")
    assert r.returncode == 0 and f"pinproxy (pid {p.pid}) has re-read it (reload 1)" in r.stdout, r
    result = json.loads((runtime / "reload-result.json").read_text())
    assert result["pid"] == p.pid and result["generation"] == 1 and result["outcome"] == "ok", result
    r = reload(pinproxy, p.config_path, "--pid", p.pid)
    assert r.returncode == 0 and "(reload 2)" in r.stdout, r
    # Neither --pid nor pid_file: nothing to signal.
    monkeypatch.delenv("RUNTIME_DIRECTORY")
    r = reload(pinproxy, p.config_path)
    assert r.returncode == 1 and "no --pid" in r.stderr, r
