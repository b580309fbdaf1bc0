"""The relay's start (`TLSRelay`): what a client sends together with the end of its handshake.

When the relay takes the client's TLS connection over, libevent may already hold bytes of it:
application data decrypted during the handshake, or encrypted records read from the socket and
not yet decrypted (a client that sends its request in the same write as its Finished message).
The relay must deliver both, in order, before anything it reads from the socket itself. These
tests drive the client side by hand (Python's SSLObject over memory BIOs) to send exactly that.
"""

from __future__ import annotations

import socket
import ssl

import origin as originlib
from proxy_harness import API, TIMEOUT, connect, make_proxy, origins, pinned_entry  # noqa: F401 (fixtures)


def start(make_proxy, origins, pki):
    return make_proxy(proxy={"allow_ports": [origins.api.port]}, resolve={API: "127.0.0.1"},
                      hosts={API: pinned_entry(pki, "api", "int-a")})


def handshake_holding_finished(sock: socket.socket, ctx: ssl.SSLContext) -> tuple[ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO]:
    """Runs the client's handshake up to its Finished message, which stays in the outgoing BIO."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname=API)
    while True:
        try:
            tls.do_handshake()
            return tls, incoming, outgoing
        except ssl.SSLWantReadError:
            pending = outgoing.read()
            if pending:
                sock.sendall(pending)
            data = sock.recv(65536)
            assert data, "the proxy closed the connection during the handshake"
            incoming.write(data)


def read_response(sock: socket.socket, tls: ssl.SSLObject, incoming: ssl.MemoryBIO) -> bytes:
    """Everything the upstream answers, until it closes (the request says Connection: close)."""
    body = b""
    while True:
        try:
            chunk = tls.read(65536)
            if not chunk:
                return body
            body += chunk
        except ssl.SSLWantReadError:
            data = sock.recv(65536)
            if not data:
                return body
            incoming.write(data)
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            return body


def request(path: str, close: bool = False) -> bytes:
    headers = f"Host: {API}\r\n" + ("Connection: close\r\n" if close else "")
    return f"GET {path} HTTP/1.1\r\n{headers}\r\n".encode()


def send_with_finished(make_proxy, origins, pki, requests: list[bytes]) -> bytes:
    """A tunnel whose client sends `requests`, one TLS record each, in the same write as its
    Finished message; everything the upstream answers, until it closes."""
    p = start(make_proxy, origins, pki)
    c = connect(p.port, API, origins.api.port)
    sock = c.sock
    sock.settimeout(TIMEOUT)
    try:
        tls, incoming, outgoing = handshake_holding_finished(sock, p.client_context())
        for each in requests:
            tls.write(each)
        sock.sendall(outgoing.read())
        response = read_response(sock, tls, incoming)
    finally:
        sock.close()
    p.assert_alive()
    return response


def test_a_request_sent_with_the_finished_message_is_relayed(make_proxy, origins, pki):
    response = send_with_finished(make_proxy, origins, pki, [request("/small", close=True)])
    assert response.startswith(b"HTTP/1.1 200"), response[:200]
    assert response.endswith(originlib.SMALL_BODY)


def test_several_requests_sent_with_the_finished_message_arrive_in_order(make_proxy, origins, pki):
    # Four pipelined requests in four records; the last asks the origin to close.
    response = send_with_finished(make_proxy, origins, pki, [request("/small")] * 3 + [request("/small", close=True)])
    assert response.count(b"HTTP/1.1 200") == 4, response[:400]
    assert response.count(originlib.SMALL_BODY) == 4
