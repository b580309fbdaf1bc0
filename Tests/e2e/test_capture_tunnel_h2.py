"""The transparent listener (behind the egress lock) with this issue's parts: the in-TLS
refusal over HTTP/2 and gRPC, `mode = "tunnel"` with its destination bound to the name the
client sent, and the refusal of an ECH ClientHello for a tunnel entry.

Each test runs in a fresh network namespace (capture_harness.py): the daemon as root (exempt),
origins on loopback port 443 inside it, and clients as user nobody with no proxy variable,
sent to pinproxy by the lock. A tunnel's original destination must be one of the addresses the
SNI name resolves to for pinproxy: through `[resolve]`, or through its DNS resolver (here the
daemon's own /etc/hosts, which the resolver reads): else `destination-mismatch`, and nothing
reaches the address the client went to.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import netns as netnslib
from capture_harness import CaptureProxy, capture, public_dir  # noqa: F401 (fixtures)
from mtls_origin import ClientPKI, MTLSOrigin
from proxy_harness import PIN_X, PIN_Y, pinned_entry
from test_tunnel_mode import client_hello

WRONG = "www.api.test"  # served by the api origin, pinned to keys it does not have


def hosts(pki) -> dict:
    return {"api.test": pinned_entry(pki, "api", "api-newkey"),
            WRONG: {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X, PIN_Y]}}


# ------------------------------------------------------------------ HTTP/2 and gRPC


def test_curl_http2_refused_inside_tls_over_h2(capture, pki):
    origin = capture.origin("api")
    proxy = capture.proxy(hosts=hosts(pki))
    proxy.lock()
    fetched = capture.curl(f"https://{WRONG}/small", capture.ca(proxy), f"{WRONG}:443:127.0.0.1", "--http2", "-v")
    assert fetched.status == 403, f"{fetched}"
    assert "ALPN: server accepted h2" in fetched.stderr and "pinproxy-refusal: pin-mismatch" in fetched.stderr, f"{fetched}"
    assert f"pinproxy refused {WRONG}:443: pin-mismatch" in fetched.body, f"{fetched}"
    assert "/small" not in origin.paths
    line = proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("host") == WRONG)
    assert (line.get("reason"), line.get("listener")) == ("pin-mismatch", "transparent"), line.raw


GRPC_CLIENT = textwrap.dedent("""
    import sys, grpc
    target, ca = sys.argv[1], sys.argv[2]
    credentials = grpc.ssl_channel_credentials(root_certificates=open(ca, "rb").read())
    with grpc.secure_channel(target, credentials) as channel:
        try:
            print(channel.unary_unary("/pinproxy.Test/Echo")(b"ping", timeout=20))
        except grpc.RpcError as error:
            print("ERROR", error.code().name)
            print(error.details())
            sys.exit(3)
""")


def test_grpc_refused_inside_tls_shows_the_reason(capture, pki):
    capture.origin("api")
    proxy = capture.proxy(hosts=hosts(pki))
    proxy.lock()
    p = capture.client(["/usr/bin/python3", "-c", GRPC_CLIENT, f"{WRONG}:443", str(capture.ca(proxy))], hosts={WRONG: "127.0.0.1"},
                       env={"GRPC_VERBOSITY": "ERROR"})
    assert p.returncode == 3, (p.stdout, p.stderr)
    code, details = p.stdout.split("\n", 1)
    assert code == "ERROR PERMISSION_DENIED", (p.stdout, p.stderr)
    assert details.startswith(f"pinproxy refused {WRONG}:443: pin-mismatch ("), details


# ------------------------------------------------------------------------- tunnels


class HostsCaptureProxy(CaptureProxy):
    """A daemon whose /etc/hosts is HOSTS (what its DNS resolver answers from)."""

    def __init__(self, *args, hosts_file: Path, **kw):
        self.hosts_file = hosts_file
        super().__init__(*args, **kw)

    def argv(self) -> list[str]:
        inner = super(CaptureProxy, self).argv()
        bind = ["unshare", "--mount", "sh", "-c", 'mount --bind "$1" /etc/hosts || exit 97; shift; exec "$@"', "sh", str(self.hosts_file)]
        return self.ns.argv(bind + inner)


def mtls_origin(capture, pki, clients, address: str) -> MTLSOrigin:
    o = capture.ns.call(MTLSOrigin, pki.path("api-chain.pem"), pki.path("api.key"), clients.ca, address=address, port=443)
    capture._origins.append(o)
    return o


def own_certificate(capture, clients) -> list[str]:
    public = capture.public / "own"
    return ["--cert", str(netnslib.readable_copy(clients.path("own-client-chain.pem"), public)),
            "--key", str(netnslib.readable_copy(clients.path("own-client.key"), public))]


def test_tunnel_with_the_clients_own_certificate_bound_by_resolve(capture, pki, tmp_path):
    clients = ClientPKI(tmp_path / "clients")
    origin = mtls_origin(capture, pki, clients, "127.0.0.1")
    decoy = mtls_origin(capture, pki, clients, "127.0.0.2")
    proxy = capture.proxy(hosts={"api.test": {"mode": "tunnel"}}, resolve={"api.test": "127.0.0.1"})
    proxy.lock()
    root = netnslib.readable_copy(pki.path("root-a.pem"), capture.public / "root")
    fetched = capture.curl("https://api.test/tunnel", root, "api.test:443:127.0.0.1", *own_certificate(capture, clients))
    assert fetched.exit == 0 and fetched.body == "client=own-client\n", f"{fetched}"
    line = proxy.wait_for_log(lambda l: l.get("event") == "connection")
    assert (line.get("outcome"), line.get("listener"), line.get("status")) == ("tunnel", "transparent", "200"), line.raw
    assert origin.seen == ["client=own-client"], origin.seen

    # The same SNI towards another address: not one api.test resolves to, refused before any connect.
    mark = proxy.mark()
    fetched = capture.curl("https://api.test/tunnel", root, "api.test:443:127.0.0.2", *own_certificate(capture, clients))
    assert fetched.exit != 0 and fetched.status == 0, f"{fetched}"
    line = proxy.wait_for_log(lambda l: l.get("event") == "connection", since=mark)
    assert (line.get("outcome"), line.get("reason"), line.get("listener")) == ("refused", "destination-mismatch", "transparent"), line.raw
    assert "127.0.0.2" in line.get("detail", "") and "127.0.0.1" in line.get("detail", ""), line.raw
    assert decoy.seen == [], f"the tunnel reached the address the client named: {decoy.seen}"
    metrics_free = [l for l in proxy.logs(mark) if l.get("event") == "tunnel-closed"]
    assert not metrics_free, [l.raw for l in metrics_free]


def test_tunnel_bound_through_the_dns_resolver(capture, pki, tmp_path):
    clients = ClientPKI(tmp_path / "clients")
    origin = mtls_origin(capture, pki, clients, "127.0.0.1")
    decoy = mtls_origin(capture, pki, clients, "127.0.0.2")
    hosts_file = capture.public / "daemon-hosts"
    hosts_file.write_text("127.0.0.1 api.test\n")
    proxy = HostsCaptureProxy(capture.bin, tmp_path / "proxy", pki, ns=capture.ns, hosts_file=hosts_file,
                              hosts={"api.test": {"mode": "tunnel"}})
    capture._proxies.append(proxy)
    proxy.start()
    proxy.lock()
    root = netnslib.readable_copy(pki.path("root-a.pem"), capture.public / "root")
    fetched = capture.curl("https://api.test/tunnel", root, "api.test:443:127.0.0.1", *own_certificate(capture, clients))
    assert fetched.exit == 0 and fetched.body == "client=own-client\n", f"{fetched}\n{proxy.describe()}"
    fetched = capture.curl("https://api.test/tunnel", root, "api.test:443:127.0.0.2", *own_certificate(capture, clients))
    assert fetched.exit != 0, f"{fetched}"
    reasons = [(l.get("outcome"), l.get("reason")) for l in proxy.decisions(listener="transparent")]
    assert reasons == [("tunnel", None), ("refused", "destination-mismatch")], reasons
    assert origin.seen == ["client=own-client"] and decoy.seen == [], (origin.seen, decoy.seen)


SEND_HELLO = textwrap.dedent("""
    import socket, sys
    s = socket.create_connection(("127.0.0.1", 443), timeout=20)
    s.sendall(bytes.fromhex(sys.argv[1]))
    try:
        while s.recv(65536):
            pass
    except OSError:
        pass
""")


def test_encrypted_client_hello_is_refused_for_a_tunnel(capture, pki, tmp_path):
    clients = ClientPKI(tmp_path / "clients")
    origin = mtls_origin(capture, pki, clients, "127.0.0.1")
    proxy = capture.proxy(hosts={"api.test": {"mode": "tunnel"}}, resolve={"api.test": "127.0.0.1"},
                          proxy={"handshake_timeout": 3})
    proxy.lock()
    p = capture.client(["/usr/bin/python3", "-c", SEND_HELLO, client_hello("api.test", encrypted_client_hello=True).hex()])
    assert p.returncode == 0, p.stderr
    line = proxy.wait_for_log(lambda l: l.get("event") == "connection")
    assert (line.get("outcome"), line.get("reason"), line.get("listener")) == ("refused", "destination-mismatch", "transparent"), line.raw
    assert "encrypted_client_hello" in line.get("detail", ""), line.raw
    assert origin.seen == [], f"the origin was reached: {origin.seen}"
