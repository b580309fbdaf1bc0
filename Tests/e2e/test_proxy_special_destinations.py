"""`pinproxy run`: block_private_destinations refuses every special-purpose address.

Each block of the IANA IPv4 and IPv6 special-purpose registries (and multicast, reserved
space) gets a name in [resolve] pointing into it, and a CONNECT to that name must be refused
with `destination-denied`; IP literals too. An ordinary unicast address is the control: it
passes the guard and fails to connect (`upstream-unreachable`).

The daemon and its client run inside a fresh network namespace (`unshare --net`, then `ip
link set lo up`) where loopback is the only interface: if the guard let an address through,
connecting to it fails with ENETUNREACH and no packet leaves the machine. The test checks the
daemon's namespace differs from its own before it sends anything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from proxy_harness import TIMEOUT, Proxy, poll, proxy_factory

# (name in [resolve], address): one address inside each block.
SPECIAL = [
    ("this-network", "0.1.2.3"),
    ("private-10", "10.1.2.3"),
    ("shared-cgnat", "100.64.0.1"),
    ("loopback-v4", "127.0.0.2"),
    ("link-local-v4", "169.254.1.1"),
    ("private-172", "172.16.5.5"),
    ("ietf-assignments", "192.0.0.170"),
    ("test-net-1", "192.0.2.10"),
    ("as112-v4", "192.31.196.1"),
    ("amt", "192.52.193.1"),
    ("6to4-relay", "192.88.99.1"),
    ("private-192", "192.168.1.1"),
    ("as112-delegation", "192.175.48.1"),
    ("benchmarking", "198.19.255.1"),
    ("test-net-2", "198.51.100.7"),
    ("test-net-3", "203.0.113.9"),
    ("multicast-v4", "239.1.2.3"),
    ("reserved-240", "240.0.0.1"),
    ("broadcast", "255.255.255.255"),
    ("unspecified-v6", "::"),
    ("loopback-v6", "::1"),
    ("v4-mapped-doc", "::ffff:192.0.2.1"),
    ("siit-private", "::ffff:0:a00:1"),
    ("nat64-doc", "64:ff9b::203.0.113.1"),
    ("nat64-local", "64:ff9b:1::a00:1"),
    ("discard-only", "100::1"),
    ("dummy-prefix", "100:0:0:1::1"),
    ("teredo", "2001::1"),
    ("benchmarking-v6", "2001:2::1"),
    ("orchid-v2", "2001:20::1"),
    ("documentation-v6", "2001:db8::1"),
    ("6to4-private", "2002:c0a8:101::1"),
    ("as112-v6", "2620:4f:8000::1"),
    ("documentation-3fff", "3fff::1"),
    ("srv6-sids", "5f00::1"),
    ("unique-local", "fd00::1"),
    ("link-local-v6", "fe80::1"),
    ("site-local", "fec0::1"),
    ("multicast-v6", "ff02::1"),
    ("reserved-v6", "4000::1"),
]
LITERALS = ["192.0.2.1", "198.18.0.1", "[2001:db8::5]", "[fe80::2]"]
# Ordinary unicast: allowed by the guard, unreachable in the namespace (no route).
CONTROL = ("ordinary.test", "9.9.9.9")

# Runs inside the namespace: CONNECT each target through the daemon, print the answers.
CLIENT = r"""
import json, socket, sys
port, answers = int(sys.argv[1]), []
for target in sys.argv[2:]:
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    answers.append(data.decode("latin-1"))
print(json.dumps(answers))
"""


class NamespacedProxy(Proxy):
    """A daemon in a network namespace of its own, holding nothing but loopback."""

    def argv(self) -> list[str]:
        return ["unshare", "--net", "sh", "-c", 'ip link set lo up || exit 96; exec "$@"', "sh", *super().argv()]

    def in_namespace(self, argv: list[str], timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
        assert os.readlink(f"/proc/{self.pid}/ns/net") != os.readlink("/proc/self/ns/net"), \
            "the daemon shares the test's network namespace"
        return subprocess.run(["nsenter", f"--net=/proc/{self.pid}/ns/net", *argv],
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def wait_ready(self, timeout: float = TIMEOUT) -> None:
        probe = [sys.executable, "-c", f"import socket; socket.create_connection(('127.0.0.1', {self.port}), timeout=1).close()"]

        def ready():
            self.assert_alive("while starting")
            return os.readlink(f"/proc/{self.pid}/ns/net") != os.readlink("/proc/self/ns/net") \
                and self.in_namespace(probe).returncode == 0

        poll(ready, timeout, interval=0.1, what=f"pinproxy to accept in its namespace\n{self.describe()}")


@pytest.fixture
def namespaced_proxy(pinproxy, pki, tmp_path):
    if os.geteuid() != 0:
        pytest.fail("network namespaces (unshare --net, nsenter) need root", pytrace=False)
    yield from proxy_factory(NamespacedProxy, pinproxy, pki, tmp_path)


def test_every_special_purpose_block_is_a_denied_destination(namespaced_proxy):
    resolve = {f"{name}.test": address for name, address in SPECIAL}
    resolve[CONTROL[0]] = CONTROL[1]
    p = namespaced_proxy(proxy={"allow_ports": [443], "block_private_destinations": True, "connect_timeout": 5},
                         resolve=resolve, default={"action": "allow-insecure"})
    targets = [f"{name}.test:443" for name, _ in SPECIAL] + [f"{literal}:443" for literal in LITERALS]
    run = p.in_namespace([sys.executable, "-c", CLIENT, str(p.port), *targets, f"{CONTROL[0]}:443"], timeout=120)
    assert run.returncode == 0, run.stderr
    answers = json.loads(run.stdout)

    for target, answer in zip(targets, answers):
        head = answer.split("\r\n\r\n")[0]
        assert head.startswith("HTTP/1.1 403 "), f"{target}: {head}"
        assert "Pinproxy-Refusal: destination-denied" in head, f"{target}: {head}"
    control = answers[-1].split("\r\n\r\n")[0]
    assert "Pinproxy-Refusal: upstream-unreachable" in control, f"{CONTROL}: {control}"

    lines = poll(lambda: [l for l in p.logs() if l.get("event") == "connection"]
                 if len([l for l in p.logs() if l.get("event") == "connection"]) == len(targets) + 1 else None,
                 what="a connection line for every CONNECT")
    denied = {l.get("host") for l in lines if l.get("reason") == "destination-denied"}
    expected = {name + ".test" for name, _ in SPECIAL} | set(LITERALS)
    assert denied == expected, sorted(expected ^ denied)
