"""`pinproxy run`: malformed, oversized, slow and non-CONNECT requests.

Each request is sent on a raw socket; the answer must be the refusal (status,
`Pinproxy-Refusal`, body naming the reason), then the connection closes, and the log
has the refused line for that client.

Assumptions (the contract leaves them open):
- Methods are case-sensitive (RFC 9110 §9.1), so `connect` is a method other than
  CONNECT: 403 cleartext-denied, like GET.
- `HTTP/1.1` is case-sensitive too (RFC 9112 §2.3): `http/1.1` is a wrong version.
- A port is 1-65535 written in digits only: `+PORT`, `-1`, a 2^32 wrap-around are 400.
- The header limits count header lines (not the request line): 101 header lines are
  over, 90 are under; 34 KiB of headers is over, 20 KiB under.
- A client that has not finished its request when request_timeout (2 s here) runs
  out is disconnected; whether it gets a 400 first is open, but if it gets an answer
  it must be `400 bad-request`.
"""

from __future__ import annotations

import select
import socket
import threading
import time

import pytest

import origin as originlib
from proxy_harness import (
    ACCEPT_HTTP10_CONNECT,
    API,
    ESTABLISHED,
    STATUS,
    TIMEOUT,
    check_refusal,
    check_refusal_log,
    connect,
    connect_request,
    https_get,
    module_proxies,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    parse_answer,
    pinned_entry,
    raw_exchange,
)

REQUEST_TIMEOUT = 2


@pytest.fixture(scope="module")
def proxy(module_proxies, origins, pki):
    return module_proxies(
        proxy={"allow_ports": [origins.api.port], "request_timeout": REQUEST_TIMEOUT},
        resolve={API: "127.0.0.1"},
        hosts={API: pinned_entry(pki, "api", "int-a")},
    )


def line(text: str) -> bytes:
    return (text + "\r\n\r\n").encode()


def cases(port: int) -> list[tuple[str, bytes, str]]:
    p = port
    long_host = ".".join(["a" * 60] * 140) + ".test"  # > 8 KiB request line
    return [
        ("garbage-line", line("hello"), "bad-request"),
        ("garbage-bytes", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40 + b"\r\n\r\n", "bad-request"),
        ("too-many-tokens", line(f"CONNECT {API}:{p} HTTP/1.1 extra"), "bad-request"),
        ("no-version", line(f"CONNECT {API}:{p}"), "bad-request"),
        ("http-2.0", line(f"CONNECT {API}:{p} HTTP/2.0"), "bad-request"),
        ("lowercase-version", line(f"CONNECT {API}:{p} http/1.1"), "bad-request"),
        ("missing-port", line(f"CONNECT {API} HTTP/1.1"), "bad-request"),
        ("empty-port", line(f"CONNECT {API}: HTTP/1.1"), "bad-request"),
        ("port-0", line(f"CONNECT {API}:0 HTTP/1.1"), "bad-request"),
        ("port-65536", line(f"CONNECT {API}:65536 HTTP/1.1"), "bad-request"),
        ("port-wraps-2^32", line(f"CONNECT {API}:{p + 2**32} HTTP/1.1"), "bad-request"),
        ("port-negative", line(f"CONNECT {API}:-1 HTTP/1.1"), "bad-request"),
        ("port-plus-sign", line(f"CONNECT {API}:+{p} HTTP/1.1"), "bad-request"),
        ("port-letters", line(f"CONNECT {API}:https HTTP/1.1"), "bad-request"),
        ("empty-host", line(f"CONNECT :{p} HTTP/1.1"), "bad-request"),
        ("host-bang", line(f"CONNECT bad!host.test:{p} HTTP/1.1"), "bad-request"),
        ("host-empty-label", line(f"CONNECT a..b.test:{p} HTTP/1.1"), "bad-request"),
        ("host-userinfo", line(f"CONNECT user@{API}:{p} HTTP/1.1"), "bad-request"),
        ("host-path", line(f"CONNECT {API}/x:{p} HTTP/1.1"), "bad-request"),
        ("bracketed-name", line(f"CONNECT [{API}]:{p} HTTP/1.1"), "bad-request"),
        ("ipv6-unbracketed", line(f"CONNECT ::1:{p} HTTP/1.1"), "bad-request"),
        ("ipv6-unclosed-bracket", line(f"CONNECT [::1:{p} HTTP/1.1"), "bad-request"),
        ("ipv6-empty-brackets", line(f"CONNECT []:{p} HTTP/1.1"), "bad-request"),
        ("absolute-uri", line(f"CONNECT https://{API}:{p}/ HTTP/1.1"), "bad-request"),
        ("request-line-over-8k", line(f"CONNECT {long_host}:{p} HTTP/1.1"), "bad-request"),
        ("header-lines-over-100",
         connect_request(API, p, [f"X-Filler-{i}: {i}" for i in range(101)]), "bad-request"),
        ("headers-over-32k",
         connect_request(API, p, [f"X-Big-{i}: " + "b" * 2048 for i in range(17)]), "bad-request"),
        ("header-without-colon", connect_request(API, p, ["this is not a header"]), "bad-request"),
        # non-CONNECT methods
        ("get-absolute", line(f"GET http://{API}:{p}/small HTTP/1.1\r\nHost: {API}:{p}"), "cleartext-denied"),
        ("get-origin-form", line(f"GET /small HTTP/1.1\r\nHost: {API}:{p}"), "cleartext-denied"),
        ("post", (f"POST http://{API}:{p}/echo HTTP/1.1\r\nHost: {API}:{p}\r\n"
                  "Content-Length: 0\r\n\r\n").encode(), "cleartext-denied"),
        ("head", line(f"HEAD http://{API}:{p}/ HTTP/1.1\r\nHost: {API}:{p}"), "cleartext-denied"),
        ("options", line(f"OPTIONS * HTTP/1.1\r\nHost: {API}:{p}"), "cleartext-denied"),
        ("lowercase-connect", line(f"connect {API}:{p} HTTP/1.1"), "cleartext-denied"),
    ]


CASE_IDS = [c[0] for c in cases(443)]


@pytest.mark.parametrize("case", CASE_IDS)
def test_bad_request(proxy, origins, case):
    _id, payload, reason = next(c for c in cases(origins.api.port) if c[0] == case)
    ex = raw_exchange(proxy.port, payload)
    ans = ex.answer
    check_refusal(ans, reason)
    assert ex.closed in ("eof", "reset"), ex
    log = proxy.connection_log(ex.client_port)
    check_refusal_log(log, reason)
    proxy.assert_alive(f"after {case}")


# ----------------------------------------------------- limits: the ok side


@pytest.mark.parametrize("extra", [
    pytest.param([f"X-Filler-{i}: {i}" for i in range(90)], id="90-header-lines"),
    pytest.param([f"X-Big-{i}: " + "b" * 2048 for i in range(10)], id="20k-of-headers"),
    pytest.param(["Proxy-Connection: keep-alive", "User-Agent: test/1"], id="ordinary-headers"),
])
def test_headers_within_limits_are_accepted(proxy, origins, extra):
    c = connect(proxy.port, API, origins.api.port, extra=extra)
    try:
        assert c.answer.status_line == ESTABLISHED, c.answer
    finally:
        c.close()


def test_http10_connect(proxy, origins):
    """The contract: HTTP/1.0 is a wrong version, 400 bad-request (note: Python < 3.12's
    http.client sends exactly this; see ACCEPT_HTTP10_CONNECT in proxy_harness.py)."""
    req = line(f"CONNECT {API}:{origins.api.port} HTTP/1.0")
    if ACCEPT_HTTP10_CONNECT:
        c = connect(proxy.port, API, origins.api.port, request=req)
        c.close()
        assert c.answer.status == 200, c.answer
    else:
        ex = raw_exchange(proxy.port, req)
        check_refusal(ex.answer, "bad-request")
        check_refusal_log(proxy.connection_log(ex.client_port), "bad-request")


@pytest.mark.parametrize("port", [1, 65535])
def test_port_bounds_parse_then_port_denied(proxy, port):
    """1 and 65535 are valid ports (so not 400), just not allowed here (403 port-denied)."""
    ex = raw_exchange(proxy.port, connect_request(API, port))
    check_refusal(ex.answer, "port-denied")


def test_request_in_pieces_is_accepted(proxy, origins):
    """A request split across several writes (but within request_timeout) is fine."""
    req = connect_request(API, origins.api.port)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=TIMEOUT) as s:
        for i in range(0, len(req), 7):
            s.sendall(req[i:i + 7])
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            assert chunk, f"closed after {data!r}"
            data += chunk
    assert parse_answer(data).status_line == ESTABLISHED


# ------------------------------------------------------------ slow client


class Trickler(threading.Thread):
    """Sends a CONNECT one byte every 300 ms until the proxy answers or closes."""

    def __init__(self, port: int, payload: bytes):
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.client_port = self.sock.getsockname()[1]
        self.payload = payload
        self.started_at = time.monotonic()
        self.closed_at: float | None = None
        self.sent = 0
        self.answer = b""
        self.how = ""

    def run(self) -> None:
        deadline = self.started_at + TIMEOUT
        try:
            while time.monotonic() < deadline:
                if self.sent < len(self.payload):
                    try:
                        self.sock.send(self.payload[self.sent:self.sent + 1])
                        self.sent += 1
                    except OSError as e:
                        self.how = f"send: {e!r}"
                        self.closed_at = time.monotonic()
                        self._drain()
                        return
                # The pacing *is* the read wait: a 300 ms bounded select for the proxy's answer/close.
                r, _, _ = select.select([self.sock], [], [], 0.3)
                if r:
                    try:
                        chunk = self.sock.recv(65536)
                    except OSError as e:
                        self.how = f"recv: {e!r}"
                        self.closed_at = time.monotonic()
                        return
                    if not chunk:
                        self.how = "eof"
                        self.closed_at = time.monotonic()
                        return
                    self.answer += chunk
            self.how = "still open at the deadline"
        finally:
            self.sock.close()

    def _drain(self) -> None:
        try:
            self.sock.settimeout(1)
            while chunk := self.sock.recv(65536):
                self.answer += chunk
        except OSError:
            pass


def test_slow_client_closed_at_request_timeout_others_served(proxy, origins):
    payload = connect_request(API, origins.api.port, ["User-Agent: " + "slow" * 20])
    slow = Trickler(proxy.port, payload)
    slow.start()
    # Meanwhile a normal client goes through, start to finish.
    status, body, _der, _cport = https_get(proxy, API, origins.api.port, "/small")
    served_at = time.monotonic()
    assert (status, body) == (200, originlib.SMALL_BODY)
    slow.join(TIMEOUT + 5)
    assert not slow.is_alive(), "the trickling client thread did not finish"
    assert slow.closed_at is not None, f"the slow client was never disconnected ({slow.how})"
    assert slow.sent < len(payload), "the whole slow request got through; the test payload is too short"
    assert served_at < slow.closed_at, "the other client was served only after the slow one was dropped"
    elapsed = slow.closed_at - slow.started_at
    assert REQUEST_TIMEOUT - 0.5 <= elapsed <= REQUEST_TIMEOUT + 3, (
        f"slow client closed after {elapsed:.2f}s; request_timeout = {REQUEST_TIMEOUT}")
    if slow.answer:
        ans = parse_answer(slow.answer)
        assert ans.status == STATUS["bad-request"] and ans.refusal == "bad-request", ans
    proxy.assert_alive("after the slow client")
