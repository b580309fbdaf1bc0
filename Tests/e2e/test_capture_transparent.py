"""The transparent listener behind the egress lock (`pinproxy egress apply`), end to end.

Each test runs in a fresh network namespace (capture_harness.py): the daemon as root (exempt),
origins on loopback port 443, and real clients (curl, Node 20's fetch, Python) as user nobody
with no proxy variable: they connect straight to the origin's address, and the lock sends them
to pinproxy, which pins, refuses inside TLS, or relays.
"""

from __future__ import annotations

import re
import socket
import struct
import textwrap
import threading

import pytest

from capture_harness import TRANSPARENT_PORT, capture, public_dir  # noqa: F401 (fixtures)
from proxy_harness import PIN_X, PIN_Y, check_proxy_status, free_port, pinned_entry, poll

ORIGIN_BODY = "hello from the pinproxy test origin\n"


def pinned_hosts(pki, **more) -> dict:
    """api.test pinned to its own key; www.api.test (same certificate) to a key it does not have."""
    hosts = {"api.test": pinned_entry(pki, "api", "api-newkey"),
             "www.api.test": {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X, PIN_Y]}}
    hosts.update(more)
    return hosts


def served(fetched, origin) -> None:
    assert fetched.exit == 0 and fetched.status == 200, f"{fetched}"
    assert fetched.body == ORIGIN_BODY, f"{fetched}"
    assert origin.paths and origin.paths[-1] == "/small", f"the origin did not serve the request: {origin.paths}"


def refused_in_tls(fetched, reason: str, host: str, headers: bool = True) -> None:
    """FETCHED is the in-TLS refusal page for REASON; with HEADERS (curl -v), its Proxy-Status too."""
    assert fetched.status == 403, f"{fetched}"
    if headers:
        [proxy_status] = re.findall(r"^< Proxy-Status: (.*?)\r?$", fetched.stderr, re.M | re.I)
        check_proxy_status(proxy_status, reason)
    assert f"pinproxy refused {host}:443: {reason}" in fetched.body, f"{fetched}"
    assert "pinproxy's egress lock sent this connection to it" in fetched.body, f"{fetched}"


@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
def test_pinned_host_is_served_and_a_wrong_pin_refused_inside_tls(capture, pki, family):
    address = "127.0.0.1" if family == "ipv4" else "::1"
    literal = address if family == "ipv4" else f"[{address}]"
    origin = capture.origin("api", address=address)
    metrics_port = free_port()
    proxy = capture.proxy(hosts=pinned_hosts(pki), proxy={"metrics_listen": f"127.0.0.1:{metrics_port}"})
    proxy.lock()
    ca = capture.ca(proxy)

    fetched = capture.curl("https://api.test/small", ca, f"api.test:443:{literal}")
    served(fetched, origin)
    allowed = proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("host") == "api.test")
    assert allowed.get("outcome") == "allowed" and allowed.get("listener") == "transparent", allowed.raw
    assert allowed.get("entry") == 'hosts."api.test"' and allowed.get("port") == "443", allowed.raw
    tunnel = proxy.wait_for_log(lambda l: l.get("event") == "tunnel-closed" and l.get("host") == "api.test")
    assert tunnel.get("listener") == "transparent", tunnel.raw

    seen = origin.connections
    fetched = capture.curl("https://www.api.test/small", ca, f"www.api.test:443:{literal}", "-v")
    refused_in_tls(fetched, "pin-mismatch", "www.api.test")
    assert "Expected (hosts.\"www.api.test\", public-key pins, any one of):" in fetched.body, fetched.body
    line = proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("host") == "www.api.test")
    assert (line.get("outcome"), line.get("reason"), line.get("listener")) == ("refused", "pin-mismatch", "transparent"), line.raw
    assert origin.paths.count("/small") == 1, f"a refused request reached the origin: {origin.paths}"
    assert origin.connections == seen + 1, "the refused host's upstream was opened once, for the verdict"

    metrics = proxy.metrics()
    assert metrics.value("pinproxy_connections_total", outcome="allowed", reason="none", listener="transparent") == 1, metrics
    assert metrics.value("pinproxy_connections_total", outcome="refused", reason="pin-mismatch", listener="transparent") == 1, metrics
    assert metrics.value("pinproxy_connections_total", outcome="allowed", reason="none", listener="connect") == 0, metrics


def test_the_same_daemon_still_serves_connect_clients(capture, pki):
    origin = capture.origin("api")
    proxy = capture.proxy(hosts=pinned_hosts(pki), resolve={"api.test": "127.0.0.1"})
    proxy.lock()
    ca = capture.ca(proxy)
    # CONNECT to the proxy's own listen port (not a capture port): the CONNECT path, unchanged.
    fetched = capture.curl("https://api.test/small", ca, "api.test:443:127.0.0.1", "-x", f"http://127.0.0.1:{proxy.port}")
    served(fetched, origin)
    line = proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("outcome") == "allowed")
    assert line.get("listener") == "connect", line.raw


def test_resolve_overrides_the_original_destination(capture, pki):
    origin = capture.origin("api", address="127.0.0.1")
    decoy = capture.origin("untrusted", address="127.0.0.2")
    proxy = capture.proxy(hosts=pinned_hosts(pki), resolve={"api.test": "127.0.0.1"})
    proxy.lock()
    ca = capture.ca(proxy)
    # The client's DNS says 127.0.0.2; [resolve] sends pinproxy to 127.0.0.1.
    served(capture.curl("https://api.test/small", ca, "api.test:443:127.0.0.2"), origin)
    assert decoy.connections == 0, "pinproxy connected to the client's address although [resolve] names the host"

    # Without [resolve], the client's own address is the upstream: the decoy, refused.
    proxy.stop()
    plain = capture.proxy(hosts=pinned_hosts(pki))
    fetched = capture.curl("https://api.test/small", capture.ca(plain), "api.test:443:127.0.0.2", "-v")
    refused_in_tls(fetched, "untrusted-chain", "api.test")
    assert decoy.connections == 1


def test_node_fetch_is_pinned_and_refused_the_same_way(capture, pki):
    origin = capture.origin("api")
    proxy = capture.proxy(hosts=pinned_hosts(pki))
    proxy.lock()
    ca = capture.ca(proxy)
    hosts = {"api.test": "127.0.0.1", "www.api.test": "127.0.0.1"}
    fetched = capture.node_fetch("https://api.test/small", ca, hosts)
    served(fetched, origin)
    fetched = capture.node_fetch("https://www.api.test/small", ca, hosts)
    refused_in_tls(fetched, "pin-mismatch", "www.api.test", headers=False)
    lines = proxy.decisions(listener="transparent")
    assert [(l.get("host"), l.get("outcome")) for l in lines] == [("api.test", "allowed"), ("www.api.test", "refused")], lines


def test_no_sni_is_refused_unless_an_entry_names_the_address(capture, pki):
    origin = capture.origin("ip")
    proxy = capture.proxy(hosts=pinned_hosts(pki))
    proxy.lock()
    ca = capture.ca(proxy)
    # curl sends no SNI to an IP literal.
    fetched = capture.curl("https://127.0.0.1/small", ca, None, "-v")
    refused_in_tls(fetched, "no-sni", "127.0.0.1")
    line = proxy.wait_for_log(lambda l: l.get("event") == "connection")
    assert (line.get("reason"), line.get("host"), line.get("listener")) == ("no-sni", "127.0.0.1", "transparent"), line.raw
    assert origin.connections == 0

    proxy.stop()
    served_proxy = capture.proxy(hosts=pinned_hosts(pki, **{"127.0.0.1": pinned_entry(pki, "ip", "api-newkey")}))
    served(capture.curl("https://127.0.0.1/small", capture.ca(served_proxy)), origin)
    assert origin.sni in ([], [None]), f"pinproxy sent SNI to an IP literal: {origin.sni}"


def test_destination_checks_apply_as_for_connect(capture, pki):
    capture.origin("api")
    proxy = capture.proxy(hosts={"api.test": pinned_entry(pki, "api", "api-newkey", ports=[8443])},
                          proxy={"block_private_destinations": True})
    proxy.lock()
    ca = capture.ca(proxy)
    refused_in_tls(capture.curl("https://api.test/small", ca, "api.test:443:127.0.0.1", "-v"), "port-denied", "api.test")
    proxy.stop()
    proxy = capture.proxy(hosts=pinned_hosts(pki), proxy={"block_private_destinations": True})
    refused_in_tls(capture.curl("https://api.test/small", capture.ca(proxy), "api.test:443:127.0.0.1", "-v"), "destination-denied", "api.test")


def test_own_connections_are_not_captured_with_the_exemption(capture, pki):
    origin = capture.origin("api")
    proxy = capture.proxy(hosts=pinned_hosts(pki))
    proxy.lock()
    ca = capture.ca(proxy)
    for _ in range(3):
        served(capture.curl("https://api.test/small", ca, "api.test:443:127.0.0.1"), origin)
    assert origin.connections == 3, "each client connection is one upstream connection"
    assert not proxy.decisions(reason="capture-loop"), proxy.describe()


def test_a_broken_exemption_is_a_capture_loop_per_connection_and_no_storm(capture, pki):
    origin = capture.origin("api")
    metrics_port = free_port()
    # The daemon runs as root, which is not exempt: its own upstream connections are captured.
    proxy = capture.proxy(hosts=pinned_hosts(pki), capture={"local": True, "exempt_users": []},
                          proxy={"metrics_listen": f"127.0.0.1:{metrics_port}"})
    proxy.lock()
    ca = capture.ca(proxy)
    for _ in range(3):
        refused_in_tls(capture.curl("https://api.test/small", ca, "api.test:443:127.0.0.1", "-v"), "capture-loop", "api.test")
    proxy.assert_alive("after the capture loops")
    assert origin.connections == 0
    # Every refused client connection has its decision line, as for any reason; the daemon's own
    # captured connections are closed without one: a loop is one line per client connection.
    lines = proxy.decisions(reason="capture-loop")
    assert len(lines) == 3, f"every capture-loop refusal is logged: {[l.raw for l in lines]}"
    assert all("captured by the egress lock" in line.get("detail", "") for line in lines), [l.raw for l in lines]
    decisions = [l.raw for l in proxy.logs() if l.get("event") == "connection"]
    assert len(decisions) == 3, f"no line for pinproxy's own captured connections: {decisions}"
    metrics = proxy.metrics()
    assert metrics.value("pinproxy_connections_total", outcome="refused", reason="capture-loop", listener="transparent") == 3, metrics
    # Nothing is left open: every looped connection was closed at its first turn.
    poll(lambda: proxy.metrics().value("pinproxy_open_tunnels") == 0, what="no open tunnel")
    assert proxy.alive()


def test_a_direct_connection_to_the_listener_is_refused(capture, pki):
    origin = capture.origin("api")
    proxy = capture.proxy(hosts=pinned_hosts(pki))
    proxy.lock()
    ca = capture.ca(proxy)
    for url in (f"https://127.0.0.1:{TRANSPARENT_PORT}/small", f"https://api.test:{TRANSPARENT_PORT}/small"):
        fetched = capture.curl(url, ca, f"api.test:{TRANSPARENT_PORT}:127.0.0.1", "-k")
        assert fetched.status == 403 and "capture-loop" in fetched.body, f"{fetched}"
        assert "made straight to the transparent listener" in fetched.body, f"{fetched}"
    assert origin.connections == 0
    line = proxy.wait_for_log(lambda l: l.get("event") == "connection")
    assert (line.get("reason"), line.get("listener")) == ("capture-loop", "transparent"), line.raw


def resetting_origin(capture):
    """A TCP server on 127.0.0.1:443 in the namespace that answers every connection with a
    reset (SO_LINGER 0, no FIN); the peers it accepted, in order."""
    server = capture.ns.call(socket.create_server, ("127.0.0.1", 443))
    peers: list[tuple[str, int]] = []

    def serve():
        while True:
            try:
                conn, peer = server.accept()
            except OSError:
                return
            peers.append(peer)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return server, peers


def test_a_client_reusing_the_port_of_an_exempt_connection_that_was_reset_is_still_captured(capture, pki):
    # An exempt connection (root's, like pinproxy's own upstreams) that the server ended with a
    # reset leaves its conntrack entry in CLOSE for 10 s, with no NAT. A captured client whose
    # connection has the same addresses and ports (the kernel gives the port out again: no
    # socket holds it) must still be sent to the listener, not matched to that entry and let
    # through to the server uncaptured.
    server, peers = resetting_origin(capture)
    try:
        proxy = capture.proxy(hosts=pinned_hosts(pki))
        proxy.lock()

        def exempt_connection_reset_by_the_server() -> int:
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", 0))
                s.settimeout(10)
                with pytest.raises(ConnectionResetError):
                    s.connect(("127.0.0.1", 443))
                    while s.recv(1):
                        pass
                return s.getsockname()[1]

        port = capture.ns.call(exempt_connection_reset_by_the_server)
        assert peers == [("127.0.0.1", port)]
        fetched = capture.curl("https://api.test/small", capture.ca(proxy), "api.test:443:127.0.0.1", "--local-port", str(port))
        assert [peer for peer in peers if peer[1] == port] == [("127.0.0.1", port)], \
            f"the captured client reached the server straight, around the egress lock: {peers}; {fetched}"
        line = proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("host") == "api.test")
        assert line.get("listener") == "transparent" and line.get("outcome") == "refused", line.raw
        assert "pinproxy refused api.test:443" in fetched.body, f"{fetched}"
    finally:
        server.close()


#: As a captured client: connects from a port of its own to 127.0.0.1:443 (sent to the
#: listener) and sends far more than a ClientHello, not TLS: pinproxy refuses it and closes
#: with bytes unread, a reset. Prints its port, then how the connection ended.
NOT_TLS_CLIENT = """
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1], flush=True)
s.settimeout(10)
s.connect(("127.0.0.1", 443))
try:
    s.sendall(b"GET / HTTP/1.0\\r\\n" + b"x" * 4_000_000)
    while s.recv(65536):
        pass
    print("closed", flush=True)
except ConnectionResetError:
    print("reset", flush=True)
"""


def test_an_exempt_connection_reusing_the_port_of_a_captured_one_that_was_reset_goes_straight_out(capture, pki):
    # The other way round: a captured connection the listener ended with a reset leaves an entry
    # redirected to the listener; an exempt connection with the same addresses and ports must
    # reach its server, not that listener.
    server, peers = resetting_origin(capture)
    try:
        proxy = capture.proxy(hosts=pinned_hosts(pki))
        proxy.lock()
        p = capture.client(["python3", "-c", NOT_TLS_CLIENT])
        port_text, ending = p.stdout.split()
        assert ending == "reset", f"{p.stdout}\n{p.stderr}"
        port = int(port_text)
        proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("reason") == "bad-request")

        def exempt_connection() -> str:
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", port))
                s.settimeout(10)
                try:
                    s.connect(("127.0.0.1", 443))
                    while s.recv(1):
                        pass
                    return "closed"
                except ConnectionResetError:  # the resetting server's answer
                    return "reset"

        ending = capture.ns.call(exempt_connection)
        assert peers == [("127.0.0.1", port)] and ending == "reset", \
            f"the exempt connection did not reach its server ({ending}; the server saw {peers})\n{proxy.describe()}"
    finally:
        server.close()
