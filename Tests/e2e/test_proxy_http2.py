"""`pinproxy run`: HTTP/2 and every ALPN protocol carried through interception.

The client gets the protocol the upstream negotiated with pinproxy.  The upstream is offered
`h2, http/1.1` first; when the client's ClientHello does not offer what the upstream chose,
pinproxy reopens the upstream with the client's own offer (the verdict runs again) before it
answers the ClientHello.  Refusals stay HTTP answers to the CONNECT.

Real clients, each pinned-OK (over h2) and wrong-pin (403 pin-mismatch, in the log):
curl --http2, httpx with http2=True, and a gRPC unary call (grpcio, through grpc_proxy).
Then TLS-level cases against an origin that reports what it negotiated: a client offering
only http/1.1 to an upstream that prefers h2, a client offering no ALPN, a protocol
pinproxy does not know, an upstream without ALPN, and a reopened upstream whose chain no
longer matches the pins (refused: the client's handshake is cut off; under `enforce = false`,
relayed as report-only, with the change of verdict logged and counted).
"""

from __future__ import annotations

import concurrent.futures
import json
import socket
import ssl
import subprocess
import time
import threading
import grpc
import httpx
import pytest

from h2origin import H2Origin
from grpc_client import grpc_call
from proxy_harness import (
    API,
    PIN_X,
    PIN_Y,
    TIMEOUT,
    check_refusal,
    clean_env,
    connect,
    curl,  # noqa: F401 (fixture)
    free_port,
    make_proxy,  # noqa: F401 (fixture)
    module_proxies,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    pinned_entry,
    poll,
    port_accepts,
)
from service_support import scrape

WRONG = "wrong.test"  # the same origins, pinned to keys they do not have
LEAF = "leaf.test"  # the same origins, pinned to the api leaf key only


class ALPNOrigin:
    """A TLS origin (Python ssl) that answers each connection with the ALPN protocol it
    negotiated (`alpn=NAME` or `alpn=-`, then closes), and records it.  Its first connection
    uses `chains[0]`, later ones the last of `chains` (to change the chain between an upstream
    connection and its reopening)."""

    def __init__(self, pki, alpn: list[str] | None, chains: tuple[str, ...] = ("api",)):
        self.contexts = []
        for stem in chains:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(pki.path(f"{stem}-chain.pem")), str(pki.path(f"{stem}.key")))
            if alpn is not None:
                ctx.set_alpn_protocols(alpn)
            self.contexts.append(ctx)
        self.negotiated: list[str | None] = []
        self.lock = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket):
        with self.lock:
            ctx = self.contexts[min(len(self.negotiated), len(self.contexts) - 1)]
            self.negotiated.append("(handshaking)")
            index = len(self.negotiated) - 1
        conn.settimeout(TIMEOUT)
        try:
            with ctx.wrap_socket(conn, server_side=True) as tls:
                name = tls.selected_alpn_protocol()
                with self.lock:
                    self.negotiated[index] = name
                tls.sendall(f"alpn={name or '-'}\n".encode())
                tls.recv(1)
        except OSError:
            with self.lock:
                self.negotiated[index] = "(failed)"
        finally:
            conn.close()

    def close(self):
        self.sock.close()


@pytest.fixture(scope="module")
def h2origin(pki):
    o = H2Origin(pki.path("api-chain.pem"), pki.path("api.key"))
    yield o
    o.close()


@pytest.fixture(scope="module")
def grpc_origin(pki):
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
    echo = grpc.unary_unary_rpc_method_handler(lambda request, context: b"pong:" + request)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("pinproxy.Test", {"Echo": echo}),))
    credentials = grpc.ssl_server_credentials([(pki.path("api.key").read_bytes(), pki.path("api-chain.pem").read_bytes())])
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    yield port
    server.stop(0)


@pytest.fixture(scope="module")
def alpn_origins(pki):
    made = {}

    def make(name: str, alpn: list[str] | None, chains: tuple[str, ...] = ("api",)) -> ALPNOrigin:
        made[name] = ALPNOrigin(pki, alpn, chains)
        return made[name]

    origins = {
        "prefers-h2": make("prefers-h2", ["h2", "http/1.1"]),
        "no-alpn": make("no-alpn", None),
        "custom": make("custom", ["pinproxy-test/1"]),
        "changes-key": make("changes-key", ["h2", "http/1.1"], chains=("api", "api-newkey")),
    }
    yield origins
    for o in made.values():
        o.close()


@pytest.fixture(scope="module")
def proxy(module_proxies, pki, h2origin, grpc_origin, alpn_origins):
    return module_proxies(
        proxy={"allow_ports": [h2origin.port, grpc_origin] + [o.port for o in alpn_origins.values()]},
        resolve={API: "127.0.0.1", WRONG: "127.0.0.1", LEAF: "127.0.0.1"},
        hosts={
            API: pinned_entry(pki, "api", "int-a"),
            # The origins' certificates name api.test, so the host check passes for WRONG only
            # through validate_host = false: the pins decide.
            WRONG: {"trust": ["root-a.pem"], "validate_host": False, "pin": "public-key", "pins": [PIN_X, PIN_Y]},
            LEAF: {"trust": ["root-a.pem"], "validate_host": False, "pin": "public-key", "pins": [pki.spki("api"), PIN_X]},
        },
    )


def decision(proxy, client_port: int) -> list:
    """The decision lines of one client connection (two when the upstream was reopened)."""
    want = f"127.0.0.1:{client_port}"
    proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("client") == want,
                       what=f"event=connection client={want}")
    return [l for l in proxy.logs() if l.get("event") == "connection" and l.get("client") == want]


def tunnel_closed(proxy, host: str, port: int, since: int = 0):
    return proxy.wait_for_log(lambda l: l.get("event") == "tunnel-closed" and l.get("port") == str(port)
                              and l.get("host") == host, since=since, what=f"tunnel-closed for {host}:{port}")


def refusal_logged(proxy, host: str, port: int, reason: str, since: int):
    return proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("host") == host
                              and l.get("port") == str(port) and l.get("reason") == reason, since=since,
                              what=f"a {reason} refusal of {host}:{port}")


# ----------------------------------------------------------------------- curl


def curl_h2(curl_bin: str, proxy, url: str, *extra: str):
    argv = [curl_bin, "-sS", "--http2", "-x", proxy.url, "--cacert", str(proxy.ca_path), "--max-time", "30",
            "-w", "\n%{http_code} %{http_connect} %{http_version}", *extra, url]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=clean_env())
    body, _, codes = p.stdout.rpartition("\n")
    return p, body, codes.split()


def test_curl_http2_pinned(proxy, h2origin, curl):
    mark = proxy.mark()
    p, body, codes = curl_h2(curl, proxy, f"https://{API}:{h2origin.port}/curl", "-v")
    assert p.returncode == 0, p.stderr
    assert codes == ["200", "200", "2"], (codes, p.stderr)
    assert json.loads(body)["http_version"] == "2"
    assert "ALPN: server accepted h2" in p.stderr
    line = proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("port") == str(h2origin.port),
                              since=mark, what="the decision line")
    assert line["outcome"] == "allowed" and line["alpn"] == "h2", line.raw
    closed = tunnel_closed(proxy, API, h2origin.port, since=mark)
    assert closed["alpn"] == "h2", closed.raw
    assert len([l for l in proxy.logs(mark) if l.get("event") == "connection"]) == 1


def test_curl_http2_wrong_pin(proxy, h2origin, curl):
    mark = proxy.mark()
    p, body, codes = curl_h2(curl, proxy, f"https://{WRONG}:{h2origin.port}/curl")
    assert p.returncode == 56, (p.returncode, p.stderr)
    assert codes[:2] == ["000", "403"], codes
    line = refusal_logged(proxy, WRONG, h2origin.port, "pin-mismatch", mark)
    assert line["status"] == "403" and line["alpn"] == "h2", line.raw


def test_curl_http2_many_streams_one_tunnel(proxy, h2origin, curl):
    """Several URLs in one curl run share one HTTP/2 connection: one CONNECT, one tunnel."""
    mark = proxy.mark()
    urls = [f"https://{API}:{h2origin.port}/stream/{i}" for i in range(20)]
    argv = [curl, "-sS", "--http2", "-x", proxy.url, "--cacert", str(proxy.ca_path), "--max-time", "30",
            "--parallel", "--parallel-max", "20", "-w", "%{http_version}\n", *urls]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=clean_env())
    assert p.returncode == 0, p.stderr
    assert p.stdout.count('"http_version": "2"') == 20, p.stdout
    lines = [l for l in proxy.logs(mark) if l.get("event") == "connection" and l.get("port") == str(h2origin.port)]
    assert len(lines) == 1, [l.raw for l in lines]


# ---------------------------------------------------------------------- httpx


def test_httpx_http2_pinned(proxy, h2origin):
    mark = proxy.mark()
    with httpx.Client(http2=True, proxy=proxy.url, verify=proxy.client_context(), trust_env=False, timeout=TIMEOUT) as client:
        responses = [client.get(f"https://{API}:{h2origin.port}/httpx/{i}") for i in range(3)]
    assert [r.http_version for r in responses] == ["HTTP/2"] * 3
    assert all(r.json()["http_version"] == "2" for r in responses)
    line = proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("port") == str(h2origin.port),
                              since=mark, what="the decision line")
    assert line["outcome"] == "allowed" and line["alpn"] == "h2", line.raw
    assert tunnel_closed(proxy, API, h2origin.port, since=mark)["alpn"] == "h2"


def test_httpx_http2_wrong_pin(proxy, h2origin):
    mark = proxy.mark()
    with httpx.Client(http2=True, proxy=proxy.url, verify=proxy.client_context(), trust_env=False, timeout=TIMEOUT) as client:
        with pytest.raises(httpx.ProxyError) as caught:
            client.get(f"https://{WRONG}:{h2origin.port}/httpx")
    assert "403" in str(caught.value)
    refusal_logged(proxy, WRONG, h2origin.port, "pin-mismatch", mark)


# ----------------------------------------------------------------------- gRPC

def test_grpc_unary_pinned(proxy, grpc_origin):
    mark = proxy.mark()
    p = grpc_call(proxy, API, grpc_origin)
    assert p.returncode == 0 and p.stdout.strip() == "pong:ping", (p.stdout, p.stderr, proxy.describe())
    line = proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("port") == str(grpc_origin),
                              since=mark, what="the decision line")
    assert line["outcome"] == "allowed" and line["alpn"] == "h2", line.raw
    # HTTP/2 has no half-close: when the client has gone, the tunnel closes (the gRPC server
    # would keep its side open until idle_timeout, 300 s here).
    closed = tunnel_closed(proxy, API, grpc_origin, since=mark)
    assert closed["alpn"] == "h2" and closed["detail"] == "client closed", closed.raw


def test_grpc_unary_wrong_pin(proxy, grpc_origin):
    mark = proxy.mark()
    p = grpc_call(proxy, WRONG, grpc_origin)
    assert p.returncode == 3 and "UNAVAILABLE" in p.stdout, (p.stdout, p.stderr)
    refusal_logged(proxy, WRONG, grpc_origin, "pin-mismatch", mark)


# ------------------------------------------------ other offers, at the TLS level


def upstream_connections(origin: ALPNOrigin, since: int) -> list:
    """What ORIGIN negotiated on each connection from index SINCE on, once no handshake is running."""
    return poll(lambda: (lambda seen: seen if seen and "(handshaking)" not in seen else None)(origin.negotiated[since:]),
                what="the origin's handshakes")


def alpn_exchange(proxy, port: int, offer: list[str] | None, host: str = API):
    """CONNECT, then TLS offering OFFER (None: no ALPN extension): (what the client
    negotiated, what the origin says it negotiated, the client port)."""
    c = connect(proxy.port, host, port)
    check = c.answer.status == 200
    assert check, f"CONNECT refused:\n{c.answer}\n{proxy.describe()}"
    ctx = proxy.client_context()
    if offer is not None:
        ctx.set_alpn_protocols(offer)
    with ctx.wrap_socket(c.sock, server_hostname=host) as tls:
        selected = tls.selected_alpn_protocol()
        line = b""
        while not line.endswith(b"\n"):
            chunk = tls.recv(100)
            assert chunk, f"the tunnel closed early ({line!r})"
            line += chunk
    return selected, line.decode().strip(), c.client_port


@pytest.mark.parametrize(
    "origin, offer, upstream_handshakes, expected",
    [
        # The common case: one upstream handshake, the upstream's choice.
        ("prefers-h2", ["h2", "http/1.1"], ["h2"], "h2"),
        ("prefers-h2", ["http/1.1", "h2"], ["h2"], "h2"),
        # The client does not offer what the upstream chose: the upstream is asked again.
        ("prefers-h2", ["http/1.1"], ["h2", "http/1.1"], "http/1.1"),
        ("prefers-h2", None, ["h2", "http/1.1"], None),
        # A protocol pinproxy does not offer by itself is carried the same way.
        ("custom", ["pinproxy-test/1", "http/1.1"], [None, "pinproxy-test/1"], "pinproxy-test/1"),
        # An upstream without ALPN: the client gets none, whatever it offers.
        ("no-alpn", ["h2", "http/1.1"], [None], None),
        ("no-alpn", None, [None], None),
    ],
    ids=["h2-both", "h2-client-order", "http11-only", "no-alpn-client", "custom-token", "no-alpn-upstream", "no-alpn-both"],
)
def test_client_gets_what_the_upstream_negotiated(proxy, alpn_origins, origin, offer, upstream_handshakes, expected):
    o = alpn_origins[origin]
    before = len(o.negotiated)
    mark = proxy.mark()
    selected, said, client_port = alpn_exchange(proxy, o.port, offer)
    assert selected == expected
    wire = expected or ("http/1.1" if upstream_handshakes[-1] == "http/1.1" else None)
    assert said == f"alpn={wire or '-'}"
    seen = upstream_connections(o, before)
    assert len(seen) == len(upstream_handshakes), seen
    assert seen[-1] == upstream_handshakes[-1], seen
    # pinproxy may close a connection it reopens before the origin's thread has finished its
    # side of the handshake: the origin then records a failure (pinproxy's decision line below
    # says what that handshake negotiated).
    assert all(s in (u, "(failed)") for s, u in zip(seen, upstream_handshakes)), seen
    decision(proxy, client_port)
    poll(lambda: len([l for l in proxy.logs(mark) if l.get("event") == "connection"]) == len(upstream_handshakes),
         what="one decision line per upstream handshake")
    lines = [l for l in proxy.logs(mark) if l.get("event") == "connection"]
    assert [l["alpn"] for l in lines] == [u or "-" for u in upstream_handshakes], [l.raw for l in lines]
    assert all(l["outcome"] == "allowed" and "reopen_outcome" not in l for l in lines), [l.raw for l in lines]
    if len(lines) == 2:
        assert "upstream reopened for the client's ALPN offer" in lines[1]["detail"], lines[1].raw


def test_reopened_upstream_resumes_the_session(proxy, alpn_origins):
    """The reopened upstream handshake resumes the session of the first one (its TLS 1.3
    ticket, which arrives after the handshake, is taken before the first connection closes).
    The ticket may still be on its way when the ClientHello arrives, so three tries: at least
    one must resume."""
    o = alpn_origins["prefers-h2"]
    resumed = []
    for _ in range(3):
        mark = proxy.mark()
        selected, _, client_port = alpn_exchange(proxy, o.port, ["http/1.1"])
        assert selected == "http/1.1"
        poll(lambda: len(decision(proxy, client_port)) == 2, what="the reopened upstream's decision line")
        resumed.append("upstream TLS session resumed" in decision(proxy, client_port)[1].get("detail", ""))
        if any(resumed):
            break
    assert any(resumed), proxy.describe()


def test_reopened_upstream_gets_the_verdict_again(proxy, alpn_origins):
    """The upstream presents another key when it is reopened: the second verdict refuses it,
    and the client's TLS handshake is cut off (the CONNECT already got its 200)."""
    o = alpn_origins["changes-key"]
    mark = proxy.mark()
    with pytest.raises((ssl.SSLError, ConnectionError, AssertionError)):
        alpn_exchange(proxy, o.port, ["http/1.1"], host=LEAF)
    first = proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("port") == str(o.port), since=mark,
                               what="the first decision")
    assert first["outcome"] == "allowed" and first["alpn"] == "h2", first.raw
    line = refusal_logged(proxy, LEAF, o.port, "pin-mismatch", mark)
    assert line["status"] == "200" and "reopened" in line["detail"] and line["alpn"] == "http/1.1", line.raw
    assert line["reopen_outcome"] == "refused" and line["reopen_reason"] == "pin-mismatch", line.raw
    assert len(upstream_connections(o, 0)) == 2
    assert not [l for l in proxy.logs(mark) if l.get("event") == "tunnel-closed" and l.get("port") == str(o.port)]


def test_report_only_reopen_says_its_verdict_changed(make_proxy, pki):
    """`enforce = false`: the first upstream presents the pinned key (a plain 200), the one
    reopened for the client's http/1.1 offer another key. The tunnel is relayed as report-only,
    as the entry says; since the 200 described the first upstream only, the reopened upstream's
    decision line says its verdict changed, and a counter counts it."""
    o = ALPNOrigin(pki, ["h2", "http/1.1"], chains=("api", "api-newkey"))
    try:
        mport = free_port()
        p = make_proxy(proxy={"allow_ports": [o.port], "metrics_listen": f"127.0.0.1:{mport}"},
                       hosts={API: {"trust": ["root-a.pem"], "pin": "public-key", "pins": [pki.spki("api"), PIN_X],
                                    "enforce": False}})
        poll(lambda: port_accepts(mport), what="the metrics listener")
        assert scrape(mport).value("pinproxy_reopen_verdict_changes_total") == 0
        c = connect(p.port, API, o.port)
        assert c.answer.status == 200 and "pinproxy-verdict" not in c.answer.headers, c.answer
        ctx = p.client_context()
        ctx.set_alpn_protocols(["http/1.1"])
        with ctx.wrap_socket(c.sock, server_hostname=API) as tls:
            assert tls.selected_alpn_protocol() == "http/1.1"
            said = b""
            while not said.endswith(b"\n"):
                chunk = tls.recv(100)
                assert chunk, f"the tunnel closed early ({said!r})\n{p.describe()}"
                said += chunk
        assert said == b"alpn=http/1.1\n"  # relayed from the reopened upstream
        poll(lambda: len(decision(p, c.client_port)) == 2, what="the reopened upstream's decision line")
        first, reopened = decision(p, c.client_port)
        assert first["outcome"] == "allowed" and "reopen_outcome" not in first, first.raw
        assert reopened["outcome"] == "report-only" and reopened["reason"] == "pin-mismatch", reopened.raw
        assert reopened["reopen_outcome"] == "report-only" and reopened["reopen_reason"] == "pin-mismatch", reopened.raw
        assert reopened["status"] == "200" and "reopened" in reopened["detail"], reopened.raw
        assert scrape(mport).value("pinproxy_reopen_verdict_changes_total") == 1
        assert upstream_connections(o, 0)[-1] == "http/1.1"
    finally:
        o.close()


def test_refusal_is_still_an_http_answer(proxy, alpn_origins):
    """A wrong pin is refused on the CONNECT, before any TLS with the client, whatever it would offer."""
    o = alpn_origins["prefers-h2"]
    c = connect(proxy.port, WRONG, o.port)
    check_refusal(c.answer, "pin-mismatch")


def test_client_hello_in_one_byte_segments(proxy, alpn_origins):
    """The ClientHello is read as it trickles in (one byte per segment), the upstream is
    reopened for its offer, and the real handshake then reads the same bytes."""
    o = alpn_origins["prefers-h2"]
    c = connect(proxy.port, API, o.port)
    assert c.answer.status == 200, c.answer
    sock = c.sock
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    ctx = proxy.client_context()
    ctx.set_alpn_protocols(["http/1.1"])
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname=API)
    deadline = time.monotonic() + TIMEOUT
    first_flight = True
    try:
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                pass
            data = outgoing.read()
            if first_flight:
                for i in range(len(data)):
                    sock.sendall(data[i:i + 1])
                first_flight = False
            elif data:
                sock.sendall(data)
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            chunk = sock.recv(65536)
            assert chunk, f"the proxy closed the connection during the handshake\n{proxy.describe()}"
            incoming.write(chunk)
        sock.sendall(outgoing.read())
        assert tls.selected_alpn_protocol() == "http/1.1"
        line = b""
        while not line.endswith(b"\n"):
            try:
                line += tls.read(100)
            except ssl.SSLWantReadError:
                chunk = sock.recv(65536)
                assert chunk, "the tunnel closed early"
                incoming.write(chunk)
        assert line == b"alpn=http/1.1\n"
    finally:
        sock.close()
    poll(lambda: len(decision(proxy, c.client_port)) == 2, what="the reopened upstream's decision line")


class StallsWhenReopened:
    """A TLS origin (h2, http/1.1) whose first connection completes its handshake, and whose
    later ones are accepted and never answered: a reopened upstream stays in its handshake.
    Records whether each stalled connection was closed by its peer."""

    def __init__(self, pki):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(str(pki.path("api-chain.pem")), str(pki.path("api.key")))
        self.ctx.set_alpn_protocols(["h2", "http/1.1"])
        self.connections = 0
        self.stalled: list[str] = []  # "open", then "closed"
        self.lock = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                first = self.connections == 1
            threading.Thread(target=self._first if first else self._stall, args=(conn,), daemon=True).start()

    def _first(self, conn: socket.socket):
        conn.settimeout(TIMEOUT)
        try:
            with self.ctx.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)
        except OSError:
            pass

    def _stall(self, conn: socket.socket):
        with self.lock:
            index = len(self.stalled)
            self.stalled.append("open")
        conn.settimeout(TIMEOUT * 3)
        try:
            while conn.recv(65536):
                pass
            with self.lock:
                self.stalled[index] = "closed"
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.sock.close()


def test_client_leaving_during_the_reopen_stops_it(make_proxy, pki):
    """A client that closes while its upstream is being reopened (for its http/1.1-only offer)
    is noticed at once: the reopened upstream's handshake is abandoned (its connection
    closed) long before handshake_timeout, and the log says so."""
    origin = StallsWhenReopened(pki)
    p = make_proxy(proxy={"allow_ports": [origin.port], "handshake_timeout": 300},
                   resolve={API: "127.0.0.1"}, hosts={API: pinned_entry(pki, "api", "int-a")})
    try:
        c = connect(p.port, API, origin.port)
        assert c.answer.status == 200, c.answer
        ctx = p.client_context()
        ctx.set_alpn_protocols(["http/1.1"])
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = ctx.wrap_bio(incoming, outgoing, server_hostname=API)
        with pytest.raises(ssl.SSLWantReadError):
            tls.do_handshake()
        c.sock.sendall(outgoing.read())  # the ClientHello: h2 is not offered, so pinproxy reopens
        poll(lambda: origin.stalled == ["open"], what=f"the reopened upstream connection\n{p.describe()}")
        c.sock.close()
        poll(lambda: origin.stalled == ["closed"], what=f"pinproxy to abandon the reopened upstream\n{p.describe()}")
        line = p.wait_for_log(lambda l: l.get("event") == "client-handshake-failed" and l.get("port") == str(origin.port),
                              what="the client-handshake-failed line")
        assert "reopened" in line["detail"], line.raw
        assert not [l for l in p.logs() if l.get("reason") == "upstream-timeout"]
    finally:
        origin.close()
