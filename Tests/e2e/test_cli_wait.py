"""What lets a script go on without sleeping: `pinproxy wait ADDRESS:PORT` returns once something
listens there, and `pinproxy reload` returns once the daemon has re-read its config."""

from __future__ import annotations

import socket
import subprocess

import pytest

from proxy_harness import API, TIMEOUT, expect_refusal, free_port, make_proxy, pinned_entry  # noqa: F401 (fixture)


def wait(pinproxy, *args, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run([str(pinproxy), "wait", *map(str, args)], capture_output=True, text=True, timeout=timeout)


def test_wait_returns_once_something_listens(pinproxy):
    port = free_port()
    waiting = subprocess.Popen([str(pinproxy), "wait", f"127.0.0.1:{port}"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        with pytest.raises(subprocess.TimeoutExpired):  # nothing listens yet: it must not return
            waiting.wait(0.3)
        with socket.create_server(("127.0.0.1", port)):
            assert waiting.wait(TIMEOUT) == 0, waiting.communicate()
    finally:
        waiting.kill()
        waiting.wait()


def test_wait_covers_every_address_and_a_wildcard_listener(pinproxy):
    with socket.create_server(("0.0.0.0", 0)) as any4, socket.create_server(("::1", 0), family=socket.AF_INET6) as six:
        r = wait(pinproxy, f"127.0.0.1:{any4.getsockname()[1]}", f"[::1]:{six.getsockname()[1]}")
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r


def test_wait_gives_up_after_its_timeout(pinproxy):
    port = free_port()
    r = wait(pinproxy, "--timeout", "0.2", f"127.0.0.1:{port}")
    assert r.returncode == 1, r
    assert f"nothing listens on 127.0.0.1:{port} after 0.2 s" in r.stderr, r
    assert wait(pinproxy, "127.0.0.1").returncode == 2
    assert wait(pinproxy).returncode == 2


def test_reload_returns_once_the_daemon_has_re_read_the_config(pinproxy, pki, make_proxy):
    """A config with many entries takes the daemon a while to load: when `pinproxy reload` returns,
    its log already says so, and the next CONNECT meets the new policy, without any waiting."""
    many = {f"h{i}.test": {"action": "deny"} for i in range(20_000)}
    p = make_proxy(proxy={"pid_file": "pinproxy.pid", "allow_ports": [443]}, hosts={API: pinned_entry(pki, "api", "int-a"), **many})
    p.hosts[API] = {"action": "deny"}
    p.write_config()
    r = subprocess.run([str(pinproxy), "reload", "--config", str(p.config_path)], capture_output=True, text=True,
                       timeout=TIMEOUT * 2)
    reloads = [line for line in p.logs() if line.get("event") == "reload"]
    assert reloads and reloads[-1].get("outcome") == "ok", (r, p.describe())
    assert r.returncode == 0 and "has re-read it" in r.stdout, r
    expect_refusal(p, API, 443, "host-denied")
