"""Nobody but pinproxy receives the redirected connections (#30 item 1), `egress status` tells
the truth (item 5), and hosts without IPv6 (item 6). Each scenario in a fresh network namespace
(capture_harness.py); squatters run as user nobody and as the daemon's own uid, without
capabilities."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from capture_harness import TRANSPARENT_PORT, CaptureProxy, capture, public_dir  # noqa: F401 (fixtures)
from proxy_harness import Proxy, pinned_entry, poll
from squat import SQUAT_SOCKET

#: Tries to listen on each (address, reuseport) on PORT: "[::]" with IPV6_V6ONLY off, so that it
#: covers IPv4 too. Those that bind accept for WAIT seconds; prints, as JSON, what each bind said
#: and how many connections each accepted.
SQUATTER = SQUAT_SOCKET + r"""
import errno, json, select, sys, time
port, wait = int(sys.argv[1]), float(sys.argv[2])
out, held = {}, []
for address in SQUAT_ADDRESSES:
    for reuseport in (False, True):
        key = f"{address} reuseport={reuseport}"
        try:
            s = squat(address, reuseport, port)
            s.setblocking(False)
            held.append((key, s))
            out[key] = "bound"
        except OSError as e:
            out[key] = errno.errorcode.get(e.errno, str(e.errno))
accepted = {key: 0 for key, _ in held}
end = time.monotonic() + (wait if held else 0)
while held and time.monotonic() < end:
    ready, _, _ = select.select([s for _, s in held], [], [], 0.05)
    for key, s in held:
        if s in ready:
            try:
                s.accept()[0].close()
                accepted[key] += 1
            except BlockingIOError:
                pass
print(json.dumps({"bind": out, "accepted": accepted}))
"""

DAEMON_USER = "daemon"  # uid 1 on Debian: the daemon's own uid in these tests


def squat(capture, port: int = TRANSPARENT_PORT, as_user: str = "nobody", wait: float = 0) -> dict:
    argv = ["/usr/bin/python3", "-c", SQUATTER, str(port), str(wait)]
    if as_user == "nobody":
        p = capture.client(argv, timeout=wait + 30)
    else:
        p = capture.ns.run("setpriv", f"--reuid={as_user}", f"--regid={as_user}", "--clear-groups", *argv, timeout=wait + 30)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def assert_nobody_can_squat(capture, when: str) -> None:
    for user in ("nobody", DAEMON_USER):
        result = squat(capture, as_user=user)
        assert "bound" not in result["bind"].values(), f"{when}: user {user} took the transparent port: {result}"
        # Privilege says no, or pinproxy's socket holds the address (no SO_REUSEPORT to join).
        assert set(result["bind"].values()) <= {"EACCES", "EADDRINUSE"}, f"{when}: {result}"


class DaemonUserProxy(CaptureProxy):
    """The daemon as user `daemon`, with CAP_NET_BIND_SERVICE as its only (ambient) capability:
    pinproxy without systemd, as docs/deployment.md says to run it."""

    def argv(self) -> list[str]:
        base = Proxy.argv(self)
        i = base.index(str(self.bin))
        setpriv = ["setpriv", f"--reuid={DAEMON_USER}", f"--regid={DAEMON_USER}", "--clear-groups",
                   "--inh-caps=+net_bind_service", "--ambient-caps=+net_bind_service"]
        return self.ns.argv(base[:i] + setpriv + base[i:])


def daemon_user_proxy(capture, pki, **kw) -> DaemonUserProxy:
    directory = capture.public / "daemon-proxy"
    directory.mkdir()
    for f in pki.dir.iterdir():  # copies, not the harness's hard links: they are chowned
        if f.is_file():
            shutil.copy(f, directory / f.name)
    shutil.chown(directory, DAEMON_USER, DAEMON_USER)
    for f in directory.iterdir():
        shutil.chown(f, DAEMON_USER, DAEMON_USER)
    proxy = DaemonUserProxy(capture.bin, directory, pki, ns=capture.ns,
                            capture={"local": True, "exempt_users": [DAEMON_USER]}, **kw)
    shutil.chown(proxy.config_path, DAEMON_USER, DAEMON_USER)
    capture._proxies.append(proxy)
    return proxy


def capabilities(pid: int) -> set[str]:
    """The capability sets of every thread of PID that hold CAP_NET_BIND_SERVICE (bit 10)."""
    held = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        for line in Path(f"/proc/{pid}/task/{task}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("CapInh", "CapPrm", "CapEff", "CapAmb") and int(value.strip(), 16) & (1 << 10):
                held.add(f"{task} {name}")
    return held


def test_no_user_can_take_the_transparent_port_in_any_phase_of_the_daemon(capture, pki):
    origin = capture.origin("api")
    proxy = daemon_user_proxy(capture, pki, hosts={"api.test": pinned_entry(pki, "api", "api-newkey")})
    # Control: the same squatter takes an unprivileged port, and would be reached there.
    free = squat(capture, port=3129)
    assert set(free["bind"].values()) <= {"bound", "EADDRINUSE"} and "bound" in free["bind"].values(), free
    proxy.lock()
    root = capture.public / "root-a.pem"
    root.write_bytes(pki.path("root-a.pem").read_bytes())
    root.chmod(0o644)

    assert_nobody_can_squat(capture, "lock on, before pinproxy ever started")
    proxy.start()
    assert capabilities(proxy.pid) == set(), "pinproxy kept CAP_NET_BIND_SERVICE after binding"
    assert_nobody_can_squat(capture, "pinproxy running")
    ca = capture.ca(proxy)
    fetched = capture.curl("https://api.test/small", ca, "api.test:443:127.0.0.1")
    assert fetched.status == 200, f"{fetched}"
    served = len(origin.paths)

    for phase, sig in (("after SIGKILL", signal.SIGKILL), ("after a stop", signal.SIGTERM)):
        proxy.send_signal(sig)
        proxy.wait_exit()
        assert_nobody_can_squat(capture, phase)
        # A redirected connection reaches no one: it fails, and the origin sees nothing.
        fetched = capture.curl("https://api.test/small", root, "api.test:443:127.0.0.1")
        assert fetched.exit != 0 and fetched.status == 0, f"{phase}: {fetched}"
        assert len(origin.paths) == served, f"{phase}: a request went out unpinned"
        proxy.start()
        assert_nobody_can_squat(capture, f"restarted {phase}")
    proxy.stop()


def test_a_squatter_that_listens_while_the_daemon_is_down_gets_no_redirected_connection(capture, pki):
    """Even while it tries, during the whole outage: its binds fail, so it accepts nothing."""
    origin = capture.origin("api")
    proxy = capture.proxy(hosts={"api.test": pinned_entry(pki, "api", "api-newkey")})
    proxy.lock()
    proxy.stop()
    root = capture.public / "root-a.pem"
    root.write_bytes(pki.path("root-a.pem").read_bytes())
    root.chmod(0o644)
    squatter = subprocess.Popen(capture.ns.argv(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                                 "/usr/bin/python3", "-c", SQUATTER, str(TRANSPARENT_PORT), "3"]),
                                stdout=subprocess.PIPE, text=True)
    fetched = capture.curl("https://api.test/small", root, "api.test:443:127.0.0.1")
    out, _ = squatter.communicate(timeout=30)
    result = json.loads(out)
    assert "bound" not in result["bind"].values() and not any(result["accepted"].values()), result
    assert fetched.exit != 0 and not origin.paths, f"{fetched}"


def test_a_root_squatter_is_reported_by_status_and_the_daemon_refuses_to_share(capture, pki):
    proxy = capture.proxy(start=False)
    proxy.lock()
    # Root (not exempt from the guarantee: root can do anything) listens on the wildcard address.
    squatter = subprocess.Popen(capture.ns.argv(["/usr/bin/python3", "-c", SQUATTER, str(TRANSPARENT_PORT), "60"]),
                                stdout=subprocess.PIPE, text=True)
    try:
        poll(lambda: "CRITICAL" in proxy.egress("status").stdout, what="status to see the squatter")
        status = proxy.egress("status")
        assert status.returncode == 4, status.stdout
        assert f"listener 127.0.0.1:8: CRITICAL: another process listens here and receives redirected connections: pid" in status.stdout, status.stdout
        proxy.start(wait=False)
        assert proxy.wait_exit() != 0
        proxy.stop()  # its exit was expected
        assert "another process already listens on 127.0.0.1:8" in proxy.log_path.read_text()
    finally:
        squatter.kill()
        squatter.wait()


def test_status_is_broken_when_a_chain_is_flushed(capture, pki):
    proxy = capture.proxy()
    proxy.lock()
    assert proxy.egress("status").returncode == 0
    capture.ns.check("nft", "flush", "chain", "inet", "pinproxy", "capture_tcp")
    status = proxy.egress("status")
    assert status.returncode == 4, f"{status.stdout}{status.stderr}"
    assert "egress lock: on, but its rules are not what" in status.stdout, status.stdout
    proxy.lock()
    assert proxy.egress("status").returncode == 0


def test_apply_refuses_an_unprivileged_transparent_port(capture, pki):
    proxy = capture.proxy(start=False)
    capture.ns.check("sysctl", "-w", "net.ipv4.ip_unprivileged_port_start=0")  # this namespace only
    p = proxy.egress("apply")
    assert p.returncode == 1, p.stdout
    assert "the transparent port 8 is not privileged here: net.ipv4.ip_unprivileged_port_start = 0" in p.stderr, p.stderr
    assert capture.ns.ruleset() == ""
    capture.ns.check("sysctl", "-w", "net.ipv4.ip_unprivileged_port_start=1024")
    other = capture.proxy(start=False, proxy={"transparent_listen": ["127.0.0.1:3129", "[::1]:3129"]})
    p = other.egress("apply")
    assert p.returncode == 1 and "net.ipv4.ip_unprivileged_port_start = 1024" in p.stderr, p.stderr


@pytest.mark.parametrize("sysctl", ["net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.lo.disable_ipv6"])
def test_without_ipv6_the_ipv4_listener_alone_is_used_and_ipv6_is_rejected(capture, pki, sysctl):
    origin = capture.origin("api")
    capture.ns.check("sysctl", "-w", f"{sysctl}=1")  # this namespace only
    proxy = capture.proxy(hosts={"api.test": pinned_entry(pki, "api", "api-newkey")})
    line = proxy.wait_for_log(lambda l: l.get("event") == "transparent-ipv6-unavailable")
    assert line["address"] == "[::1]:8", line
    p = proxy.egress("apply")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("egress lock: on: tcp 443 to 127.0.0.1:8; IPv6 to 443 rejected (IPv6 is off on this host)"), p.stdout
    status = proxy.egress("status")
    assert status.returncode == 0, f"{status.stdout}{status.stderr}"
    assert "IPv6: off on this host; outgoing IPv6 to the capture ports is rejected\n" in status.stdout, status.stdout
    assert "listener 127.0.0.1:8: pinproxy" in status.stdout and "[::1]" not in status.stdout.split("\n", 1)[1], status.stdout
    ca = capture.ca(proxy)
    assert capture.curl("https://api.test/small", ca, "api.test:443:127.0.0.1").status == 200

    # IPv6 comes back: no way around the lock opens.
    capture.ns.check("sysctl", "-w", f"{sysctl}=0")
    origin6 = capture.origin("api", address="::1")
    fetched = capture.curl("https://api.test/small", ca, "api.test:443:[::1]")
    assert fetched.exit != 0 and fetched.status == 0, f"{fetched}"
    assert not origin6.paths, "an IPv6 connection went out uncaptured"
    assert set(squat(capture)["bind"].values()) <= {"EACCES", "EADDRINUSE"}
