"""`refusal = "in-tls"` in the client's own protocol: HTTP/2 and gRPC.

A client that offers h2 gets h2 (ALPN), and its first stream is answered with the refusal: the
status of the reason (403, 502, ...) and the text page, then GOAWAY. A gRPC request
(`content-type: application/grpc`) gets a Trailers-Only response: `:status 200`,
`grpc-status` 7 (PERMISSION_DENIED) for policy and certificate refusals, 14 (UNAVAILABLE) for
upstream failures, and the reason in a percent-encoded `grpc-message`, which grpcio puts in
the exception's details. A client that offers only http/1.1 still gets HTTP/1.1.

Real clients (curl --http2, grpcio in a process of its own) and, for the edges, a raw HTTP/2
client made with the `h2` package (what the refusal must bound: a header block too large,
a client that never sends a request). Every origin and name is on loopback ([resolve]).
"""

from __future__ import annotations

import subprocess
import urllib.parse

import h2.config
import h2.connection
import h2.events
import pytest

from grpc_client import grpc_call
from proxy_harness import (
    API,
    PIN_X,
    PIN_Y,
    TIMEOUT,
    check_proxy_status,
    clean_env,
    connect,
    curl,  # noqa: F401 (fixture)
    make_proxy,  # noqa: F401 (fixture)
    module_proxies,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    read_to_eof,
)

CLOSED = "closed.test"


@pytest.fixture(scope="module")
def proxy(module_proxies, origins, pki):
    return module_proxies(
        proxy={"allow_ports": [origins.api.port, origins.closed.port], "refusal": "in-tls", "handshake_timeout": 5},
        resolve={API: "127.0.0.1", CLOSED: "127.0.0.1"},
        hosts={API: {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X, PIN_Y]},
               CLOSED: {"trust": ["root-a.pem"]}},
    )


def refusal_line(proxy, since: int, reason: str) -> dict:
    return proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("reason") == reason, since=since,
                              what=f"the {reason} decision line")


# ----------------------------------------------------------------------- curl


def curl_h2(curl_bin: str, proxy, url: str, *extra: str) -> tuple[subprocess.CompletedProcess, str, list[str]]:
    argv = [curl_bin, "-sS", "--http2", "-x", proxy.url, "--cacert", str(proxy.ca_path), "--max-time", "30",
            "-w", "\n%{http_code} %{http_connect} %{http_version}", *extra, url]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=clean_env())
    body, _, codes = p.stdout.rpartition("\n")
    return p, body, codes.split()


def test_curl_http2_gets_the_page_over_h2(proxy, origins, curl):
    mark = proxy.mark()
    p, body, codes = curl_h2(curl, proxy, f"https://{API}:{origins.api.port}/h2", "-v")
    assert p.returncode == 0, p.stderr
    assert codes == ["403", "200", "2"], (codes, p.stderr)
    assert "ALPN: server accepted h2" in p.stderr, p.stderr
    assert "pinproxy-refusal: pin-mismatch" in p.stderr, p.stderr
    status = [l.split(":", 1)[1].strip() for l in p.stderr.splitlines() if l.lower().startswith("< proxy-status:")]
    assert len(status) == 1, p.stderr
    check_proxy_status(status[0], "pin-mismatch")
    assert f"pinproxy refused {API}:{origins.api.port}: pin-mismatch" in body, body
    assert PIN_X in body and "To change the policy" in body, body
    assert not [path for path in origins.api.paths if path.startswith("/h2")], "the refused origin received the request"
    line = refusal_line(proxy, mark, "pin-mismatch")
    assert line["status"] == "403", line.raw
    proxy.wait_for_log(lambda l: l.get("event") == "refusal-in-tls" and "page was sent" in l.get("detail", ""), since=mark,
                       what="the refusal-in-tls line")


def test_curl_http2_head_gets_no_body(proxy, origins, curl):
    p, body, codes = curl_h2(curl, proxy, f"https://{API}:{origins.api.port}/", "-I")
    assert p.returncode == 0, p.stderr
    assert codes[0] == "403" and codes[2] == "2", codes
    assert "pinproxy-refusal: pin-mismatch" in body and "content-length:" in body, body
    assert "pinproxy refused" not in body, body


def test_curl_http2_upstream_failure_is_a_502(proxy, origins, curl):
    p, body, codes = curl_h2(curl, proxy, f"https://{CLOSED}:{origins.closed.port}/")
    assert p.returncode == 0, p.stderr
    assert codes == ["502", "200", "2"], (codes, p.stderr)
    assert "upstream-unreachable" in body, body


def test_curl_http11_still_gets_http11(proxy, origins, curl):
    p, body, codes = curl_h2(curl, proxy, f"https://{API}:{origins.api.port}/", "--http1.1")
    assert p.returncode == 0, p.stderr
    assert codes == ["403", "200", "1.1"], (codes, p.stderr)
    assert "pin-mismatch" in body, body


# ----------------------------------------------------------------------- gRPC

def test_grpc_policy_refusal_is_permission_denied_with_the_reason(proxy, origins):
    mark = proxy.mark()
    p = grpc_call(proxy, API, origins.api.port)
    assert p.returncode == 3, (p.stdout, p.stderr)
    code, details = p.stdout.split("\n", 1)
    assert code == "ERROR PERMISSION_DENIED", (p.stdout, p.stderr)
    assert details.startswith(f"pinproxy refused {API}:{origins.api.port}: pin-mismatch ("), details
    assert "none of the 2 public-key pin(s) matches" in details, details
    refusal_line(proxy, mark, "pin-mismatch")
    proxy.wait_for_log(lambda l: l.get("event") == "refusal-in-tls" and "page was sent" in l.get("detail", ""), since=mark,
                       what="the refusal-in-tls line")


def test_grpc_upstream_failure_is_unavailable_with_the_reason(proxy, origins):
    p = grpc_call(proxy, CLOSED, origins.closed.port)
    assert p.returncode == 3, (p.stdout, p.stderr)
    code, details = p.stdout.split("\n", 1)
    assert code == "ERROR UNAVAILABLE", (p.stdout, p.stderr)
    assert details.startswith(f"pinproxy refused {CLOSED}:{origins.closed.port}: upstream-unreachable ("), details


# ------------------------------------------------------- a raw HTTP/2 client


class RawH2:
    """CONNECT, TLS offering h2 (trusting the pinproxy CA), and an `h2` client connection."""

    def __init__(self, proxy, host: str, port: int):
        c = connect(proxy.port, host, port)
        assert c.answer.status == 200, c.answer
        ctx = proxy.client_context()
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        self.tls = ctx.wrap_socket(c.sock, server_hostname=host)
        assert self.tls.selected_alpn_protocol() == "h2"
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.h2.initiate_connection()
        self.flush()

    def flush(self):
        self.tls.sendall(self.h2.data_to_send())

    def events(self) -> list:
        """Everything until the server closes the connection."""
        data, _ = read_to_eof(self.tls, TIMEOUT)
        return self.h2.receive_data(data) if data else []

    def close(self):
        self.tls.close()


def test_grpc_trailers_only_response_on_the_wire(proxy, origins):
    """One header block that ends the stream: :status 200, content-type application/grpc,
    grpc-status 7 and grpc-message percent-encoded; then GOAWAY (NO_ERROR, last stream 1)."""
    client = RawH2(proxy, API, origins.api.port)
    try:
        client.h2.send_headers(1, [(":method", "POST"), (":scheme", "https"), (":authority", f"{API}:{origins.api.port}"),
                                   (":path", "/pinproxy.Test/Echo"), ("content-type", "application/grpc+proto"),
                                   ("te", "trailers")])
        client.flush()
        events = client.events()
    finally:
        client.close()
    responses = [e for e in events if isinstance(e, h2.events.ResponseReceived)]
    assert len(responses) == 1 and responses[0].stream_ended is not None, events
    headers = dict(responses[0].headers)
    assert headers[":status"] == "200" and headers["content-type"] == "application/grpc", headers
    assert headers["grpc-status"] == "7" and headers["pinproxy-refusal"] == "pin-mismatch", headers
    check_proxy_status(headers["proxy-status"], "pin-mismatch")
    message = headers["grpc-message"]
    assert all(0x20 <= ord(ch) <= 0x7E for ch in message), message
    assert urllib.parse.unquote(message).startswith(f"pinproxy refused {API}:{origins.api.port}: pin-mismatch ("), message
    assert not [e for e in events if isinstance(e, h2.events.DataReceived)], events
    goaway = [e for e in events if isinstance(e, h2.events.ConnectionTerminated)]
    assert len(goaway) == 1 and goaway[0].error_code == 0 and goaway[0].last_stream_id == 1, events


def test_a_header_block_over_the_bound_is_not_read(proxy, origins):
    """A client that sends more than 64 KiB of header block (CONTINUATIONs) without ending it:
    pinproxy stops reading at the bound, sends GOAWAY and closes."""
    mark = proxy.mark()
    client = RawH2(proxy, API, origins.api.port)
    try:
        def frame(kind: int, payload: bytes) -> bytes:  # flags 0: no END_HEADERS
            return len(payload).to_bytes(3, "big") + bytes([kind, 0]) + (1).to_bytes(4, "big") + payload
        # HPACK: literal fields without indexing, "x-pad" and 1000 bytes each (RFC 7541 6.2.2).
        field = b"\x00\x05x-pad\x7f\xe9\x06" + b"a" * 1000
        block = field * 144
        chunks = [block[i:i + 16000] for i in range(0, len(block), 16000)]
        try:
            client.tls.sendall(frame(0x1, chunks[0]))  # HEADERS
            for chunk in chunks[1:]:
                client.tls.sendall(frame(0x9, chunk))  # CONTINUATION
        except OSError:
            pass  # closed by pinproxy
        data, how = read_to_eof(client.tls, TIMEOUT)
    finally:
        client.close()
    line = proxy.wait_for_log(lambda l: l.get("event") == "refusal-in-tls" and "closed" in l.get("detail", ""), since=mark,
                              what="the refusal-in-tls line of the closed connection")
    assert "HTTP/2" in line["detail"] or "64 KiB" in line["detail"], line.raw


def test_a_client_that_sends_no_request_is_closed_after_the_timeout(make_proxy, origins):
    p = make_proxy(proxy={"allow_ports": [origins.api.port], "refusal": "in-tls", "handshake_timeout": 3},
                   hosts={API: {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X, PIN_Y]}})
    client = RawH2(p, API, origins.api.port)
    try:
        data, how = read_to_eof(client.tls, TIMEOUT)  # preface sent, no request: only SETTINGS come back
        events = client.h2.receive_data(data)
        assert not [e for e in events if isinstance(e, h2.events.ResponseReceived)], events
    finally:
        client.close()
    p.wait_for_log(lambda l: l.get("event") == "refusal-in-tls" and "no TLS handshake or request" in l.get("detail", ""),
                   what="the timeout line")
