"""Containers behind the egress lock: forwarded traffic from `capture.forward_interfaces`.

Everything runs in network namespaces the test makes (no kernel module is loaded): a "host"
with forwarding on, a Linux bridge `br-test` and the lock applied (pinproxy as root, exempt);
two "containers", each a namespace with a veth on that bridge and a default route through the
host; and the origin in a namespace of its own, routed through the host. The clients in the
containers run as user nobody with no proxy variable: only the lock sends them to pinproxy,
which knows them by their source address (`[clients."net:..."]`).
"""

from __future__ import annotations

import json
import socket
import subprocess
import textwrap

import pytest
from pathlib import Path

import netns as netnslib
import origin as originlib
from capture_harness import CaptureProxy, Fetched, TIMEOUT, capture, public_dir  # noqa: F401 (fixtures)
from proxy_harness import clean_env, toml_table
from test_capture_transparent import ORIGIN_BODY, pinned_hosts, refused_in_tls

BRIDGE = "br-test"
HOST_ON_BRIDGE = "10.200.0.1"
CONTAINERS = ["10.200.0.2", "10.200.0.3"]
HOST_TO_ORIGIN = "10.201.0.1"
ORIGIN = "10.201.0.2"
#: The same, in IPv6 (/64 each).
HOST_ON_BRIDGE6 = "fd00:200::1"
CONTAINERS6 = ["fd00:200::2", "fd00:200::3"]
HOST_TO_ORIGIN6 = "fd00:201::1"
ORIGIN6 = "fd00:201::2"
FORWARD = {"local": True, "exempt_users": ["root"], "forward_interfaces": ["br-*"]}
WILDCARD = {"transparent_listen": ["0.0.0.0:8", "[::]:8"]}


class Network:
    """The host (the capture fixture's namespace), the containers and the origin's namespace."""

    def __init__(self, host: netnslib.NetNS):
        self.host = host
        self.containers: list[netnslib.NetNS] = []
        self.origin_ns = netnslib.NetNS()
        host.check("sysctl", "-qw", "net.ipv4.ip_forward=1")
        host.check("sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
        host.check("ip", "link", "add", BRIDGE, "type", "bridge")
        host.check("ip", "addr", "add", f"{HOST_ON_BRIDGE}/24", "dev", BRIDGE)
        host.check("ip", "addr", "add", f"{HOST_ON_BRIDGE6}/64", "dev", BRIDGE, "nodad")
        host.check("ip", "link", "set", BRIDGE, "up")
        for index, address in enumerate(CONTAINERS):
            ns = netnslib.NetNS()
            self.containers.append(ns)
            host.check("ip", "link", "add", f"vc{index}", "type", "veth", "peer", "name", "eth0", "netns", str(ns.holder.pid))
            host.check("ip", "link", "set", f"vc{index}", "master", BRIDGE, "up")
            self._address(ns, address, HOST_ON_BRIDGE, CONTAINERS6[index], HOST_ON_BRIDGE6)
        host.check("ip", "link", "add", "vo", "type", "veth", "peer", "name", "eth0", "netns", str(self.origin_ns.holder.pid))
        host.check("ip", "addr", "add", f"{HOST_TO_ORIGIN}/24", "dev", "vo")
        host.check("ip", "addr", "add", f"{HOST_TO_ORIGIN6}/64", "dev", "vo", "nodad")
        host.check("ip", "link", "set", "vo", "up")
        self._address(self.origin_ns, ORIGIN, HOST_TO_ORIGIN, ORIGIN6, HOST_TO_ORIGIN6)

    @staticmethod
    def _address(ns: netnslib.NetNS, address: str, gateway: str, address6: str, gateway6: str) -> None:
        ns.check("ip", "addr", "add", f"{address}/24", "dev", "eth0")
        ns.check("ip", "addr", "add", f"{address6}/64", "dev", "eth0", "nodad")
        ns.check("ip", "link", "set", "eth0", "up")
        ns.check("ip", "route", "add", "default", "via", gateway)
        ns.check("ip", "-6", "route", "add", "default", "via", gateway6)

    def origin(self, pki, stem: str = "api", address: str = ORIGIN) -> originlib.TLSOrigin:
        return self.origin_ns.call(originlib.TLSOrigin, pki.path(f"{stem}-chain.pem"), pki.path(f"{stem}.key"),
                                   name=stem, address=address, port=443)

    def run(self, ns: netnslib.NetNS, argv, timeout: float = 60) -> subprocess.CompletedProcess:
        """ARGV as user nobody in NS, with no proxy variable."""
        return ns.run(*netnslib.as_nobody(argv), env=clean_env(HOME="/"), timeout=timeout)

    def curl(self, ns: netnslib.NetNS, host: str, ca, *extra: str, origin: str = ORIGIN) -> Fetched:
        literal = f"[{origin}]" if ":" in origin else origin
        p = self.run(ns, ["curl", "-sS", "--cacert", str(ca), "--max-time", str(int(TIMEOUT)), "-w", "\n%{http_code}",
                          "--resolve", f"{host}:443:{literal}", *extra, f"https://{host}/small"])
        body, _, code = p.stdout.rpartition("\n")
        return Fetched(p.returncode, int(code) if code.isdigit() else 0, body, p.stderr)

    def close(self) -> None:
        for ns in [*self.containers, self.origin_ns]:
            ns.close()


@pytest.fixture
def network(capture):
    if not _bridges_available():
        pytest.skip("the kernel has no bridge driver loaded (the test loads no module)")
    n = Network(capture.ns)
    try:
        yield n
    finally:
        n.close()


def _bridges_available() -> bool:
    return Path("/sys/module/bridge").exists()


CLIENTS = {
    "net:10.200.0.0/24": {"deny": ["blocked.test"]},
    "net:10.200.0.3/32": {"allow": []},
    "net:fd00:200::/64": {"deny": ["blocked.test"]},
    "net:fd00:200::3/128": {"allow": []},
    "remote": {"allow": []},
}


class ClientsProxy(CaptureProxy):
    """A CaptureProxy whose config has the [clients] sections CLIENTS."""

    def __init__(self, *args, clients: dict, **kw):
        self.clients = clients
        super().__init__(*args, **kw)

    def render(self) -> str:
        return super().render() + "".join("\n" + toml_table(f"[clients.{json.dumps(k)}]", v) for k, v in self.clients.items())


def forwarding_proxy(capture, pki, **kw) -> CaptureProxy:
    p = ClientsProxy(capture.bin, capture.tmp / f"proxy{len(capture._proxies)}", pki, ns=capture.ns, hosts=pinned_hosts(pki),
                     capture=FORWARD, proxy=WILDCARD, clients=CLIENTS, **kw)
    capture._proxies.append(p)
    p.start()
    p.lock()
    return p


def test_a_container_is_pinned_known_by_its_address_and_another_denied(capture, network, pki):
    origin = network.origin(pki)
    proxy = forwarding_proxy(capture, pki)
    ca = capture.ca(proxy)
    first, second = network.containers
    status = proxy.egress("status")
    assert status.returncode == 0, f"{status.stdout}\n{status.stderr}"
    assert "forwarded from br-*: tcp captured, udp rejected" in status.stdout, status.stdout

    fetched = network.curl(first, "api.test", ca)
    assert fetched.exit == 0 and fetched.status == 200 and fetched.body == ORIGIN_BODY, f"{fetched}"
    line = proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("host") == "api.test")
    assert (line.get("outcome"), line.get("listener")) == ("allowed", "transparent"), line.raw
    assert line.get("client_address") == CONTAINERS[0] and line.get("client_net") == "net:10.200.0.0/24", line.raw
    assert line.get("client", "").startswith(f"{CONTAINERS[0]}:"), line.raw
    assert "client_uid" not in line.raw, line.raw

    # The wrong pin: refused inside the client's TLS; the origin serves nothing.
    fetched = network.curl(first, "www.api.test", ca, "-v")
    refused_in_tls(fetched, "pin-mismatch", "www.api.test")
    assert origin.paths.count("/small") == 1, origin.paths

    # The other container: its /32 section allows nothing (and `remote` does not apply to either).
    fetched = network.curl(second, "api.test", ca, "-v")
    refused_in_tls(fetched, "client-denied", "api.test")
    denied = proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("reason") == "client-denied")
    assert denied.get("client_address") == CONTAINERS[1], denied.raw
    assert denied.get("client_net") == "net:10.200.0.0/24,net:10.200.0.3/32", denied.raw
    assert 'clients."net:10.200.0.3/32" allows no host' in denied.get("detail", ""), denied.raw
    assert origin.paths.count("/small") == 1, origin.paths

    # `egress status` checks the forward rules: without the prerouting chain the lock is broken.
    capture.ns.check("nft", "delete", "chain", "inet", "pinproxy", "capture_forwarded_tcp")
    status = proxy.egress("status")
    assert status.returncode == 4, f"{status.stdout}\n{status.stderr}"


def test_udp_to_a_capture_port_from_a_container_gets_an_icmp_error(capture, network, pki):
    received = network.origin_ns.call(_udp_listener)
    forwarding_proxy(capture, pki)
    script = textwrap.dedent(f"""
        import socket
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(5)
        s.connect(("{ORIGIN}", 443))
        s.send(b"quic?")
        try:
            s.recv(100)
            print("answered")
        except ConnectionRefusedError:
            print("refused")
        except socket.timeout:
            print("timeout")
    """)
    p = network.run(network.containers[0], ["python3", "-c", script])
    assert p.stdout.strip() == "refused", f"{p.stdout}\n{p.stderr}"
    received.settimeout(0.5)
    with pytest.raises(socket.timeout):
        received.recv(100)
    received.close()


def _udp_listener() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((ORIGIN, 443))
    return s


def test_the_hosts_own_traffic_is_captured_once(capture, network, pki):
    network.origin(pki)
    proxy = forwarding_proxy(capture, pki)
    ca = capture.ca(proxy)
    fetched = network.curl(network.host, "api.test", ca)
    assert fetched.exit == 0 and fetched.status == 200, f"{fetched}"
    line = proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("host") == "api.test")
    assert line.get("client_uid") == "65534" and "client_address" not in line.raw, line.raw
    proxy.wait_for_log(lambda l: l.get("event") == "tunnel-closed")
    assert len(proxy.decisions(host="api.test")) == 1, [l.raw for l in proxy.decisions()]


def test_nothing_else_can_take_the_forwarded_connections_and_the_lock_fails_closed(capture, network, pki):
    origin = network.origin(pki)
    proxy = forwarding_proxy(capture, pki)
    ca = capture.ca(proxy)
    # Another user on the host cannot listen where forwarded connections are delivered.
    for address in ["0.0.0.0", HOST_ON_BRIDGE, "127.0.0.1"]:
        p = network.run(network.host, ["python3", "-c", f"import socket; socket.socket().bind(('{address}', 8))"])
        assert p.returncode != 0 and "Permission denied" in p.stderr, f"{address}: {p.stderr}"
    proxy.stop()
    fetched = network.curl(network.containers[0], "api.test", ca)
    assert fetched.exit != 0 and fetched.status == 0, f"{fetched}"
    assert origin.connections == 0, "a forwarded connection reached the origin while pinproxy was down"


def test_a_container_connecting_to_the_listener_directly_is_dropped(capture, network, pki):
    forwarding_proxy(capture, pki)
    script = f"import socket; socket.create_connection(('{HOST_ON_BRIDGE}', 8), timeout=3)"
    p = network.run(network.containers[0], ["python3", "-c", script])
    assert p.returncode != 0 and "timed out" in p.stderr, p.stderr


def test_an_ipv6_container_is_pinned_and_another_denied(capture, network, pki):
    origin = network.origin(pki, address=ORIGIN6)
    proxy = forwarding_proxy(capture, pki)
    ca = capture.ca(proxy)
    first, second = network.containers
    fetched = network.curl(first, "api.test", ca, origin=ORIGIN6)
    assert fetched.exit == 0 and fetched.status == 200 and fetched.body == ORIGIN_BODY, f"{fetched}"
    line = proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("host") == "api.test")
    assert line.get("client_address") == CONTAINERS6[0] and line.get("client_net") == "net:fd00:200::/64", line.raw
    fetched = network.curl(first, "www.api.test", ca, "-v", origin=ORIGIN6)
    refused_in_tls(fetched, "pin-mismatch", "www.api.test")
    fetched = network.curl(second, "api.test", ca, "-v", origin=ORIGIN6)
    refused_in_tls(fetched, "client-denied", "api.test")
    denied = proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("reason") == "client-denied")
    assert denied.get("client_net") == "net:fd00:200::/64,net:fd00:200::3/128", denied.raw
    assert origin.paths.count("/small") == 1, origin.paths


def test_a_container_that_does_not_trust_the_ca_fails_its_handshake_and_private_destinations_are_refused(capture, network, pki):
    origin = network.origin(pki)
    proxy = forwarding_proxy(capture, pki)
    first = network.containers[0]
    # No --cacert: curl trusts the system store only, which lacks pinproxy's CA.
    p = network.run(first, ["curl", "-sS", "--max-time", str(int(TIMEOUT)), "--resolve", f"api.test:443:{ORIGIN}", "https://api.test/small"])
    assert p.returncode == 60, f"exit {p.returncode}\n{p.stderr}"
    line = proxy.wait_for_log(lambda l: l.get("event") == "client-handshake-failed")
    assert line.get("client_address") == CONTAINERS[0] and line.get("client", "").startswith(f"{CONTAINERS[0]}:"), line.raw
    assert origin.paths == [], origin.paths
    proxy.stop()

    # block_private_destinations applies to forwarded clients as to local ones.
    private = ClientsProxy(capture.bin, capture.tmp / "private", pki, ns=capture.ns, hosts=pinned_hosts(pki), capture=FORWARD,
                           proxy={**WILDCARD, "block_private_destinations": True}, clients=CLIENTS)
    capture._proxies.append(private)
    private.start()
    fetched = network.curl(first, "api.test", capture.ca(private), "-v")
    refused_in_tls(fetched, "destination-denied", "api.test")
    assert origin.paths == [], origin.paths
