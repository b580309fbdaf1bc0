"""`pinproxy run`: TLS settings chosen for cost, on both sides of a tunnel.

TLS 1.3 connections use TLS_AES_128_GCM_SHA256 when the peer offers it, whatever the peer's
order: its key schedule hashes with SHA-256 rather than SHA-384 and it encrypts faster than
AES-256-GCM (Python's client, like curl's OpenSSL, lists AES-256 first). The client gets one
session ticket per handshake instead of OpenSSL's default two.
"""

from __future__ import annotations

import queue
import socket
import ssl
import struct
import threading

import pytest

from proxy_harness import (
    API,
    Tunnel,
    connect,
    module_proxies,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    pinned_entry,
)

AES128 = "TLS_AES_128_GCM_SHA256"


class HelloCatcher:
    """A plain TCP listener on loopback that keeps the first bytes of each connection (the
    ClientHello record) and closes."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.hello: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(10)
                data = b""
                try:
                    while len(data) < 5 or len(data) < 5 + struct.unpack("!H", data[3:5])[0]:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                except OSError:
                    pass
                self.hello.put(data)


def client_hello_suites(record: bytes) -> list[int]:
    """The cipher suites of a ClientHello record, in the client's order."""
    assert record[0] == 22 and record[5] == 1, record[:10]  # handshake record, ClientHello
    body = record[9:]
    offset = 2 + 32  # legacy version, random
    offset += 1 + body[offset]  # session id
    length = struct.unpack("!H", body[offset:offset + 2])[0]
    return [struct.unpack("!H", body[i:i + 2])[0] for i in range(offset + 2, offset + 2 + length, 2)]


@pytest.fixture(scope="module")
def hello_catcher():
    catcher = HelloCatcher()
    yield catcher
    catcher.listener.close()


@pytest.fixture(scope="module")
def proxy(module_proxies, origins, pki, hello_catcher):
    return module_proxies(
        proxy={"allow_ports": [origins.api.port, hello_catcher.port]},
        resolve={API: "127.0.0.1"},
        hosts={API: pinned_entry(pki, "api", "int-a", ports=[origins.api.port, hello_catcher.port])},
    )


def tls13_client(proxy) -> ssl.SSLContext:
    ctx = proxy.client_context()
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    return ctx


def test_client_side_prefers_aes128(proxy, origins):
    ctx = tls13_client(proxy)
    offered = [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.3"]
    assert offered.index("TLS_AES_256_GCM_SHA384") < offered.index(AES128), offered
    with Tunnel(proxy, API, origins.api.port, ctx=ctx) as t:
        assert t.tls.version() == "TLSv1.3"
        assert t.tls.cipher()[0] == AES128
        assert t.tls.getpeercert(binary_form=True)  # the handshake is complete


def test_upstream_side_offers_aes128_first(proxy, hello_catcher):
    """The first TLS 1.3 suite in pinproxy's ClientHello, read off the wire by a plain socket."""
    c = connect(proxy.port, API, hello_catcher.port)
    hello = hello_catcher.hello.get(timeout=30)
    if c.sock:
        c.sock.close()
    suites = client_hello_suites(hello)
    tls13 = [s for s in suites if s >> 8 == 0x13]
    assert tls13[:1] == [0x1301], [hex(s) for s in suites]  # TLS_AES_128_GCM_SHA256


def test_client_gets_one_session_ticket(proxy, origins):
    """Counted on a raw TLS 1.3 connection: each NewSessionTicket message is one ticket."""
    tickets = []
    ctx = tls13_client(proxy)
    ctx._msg_callback = lambda conn, direction, version, content_type, msg_type, data: (
        tickets.append(1) if direction == "read" and msg_type == ssl._TLSMessageType.NEWSESSION_TICKET else None)
    with Tunnel(proxy, API, origins.api.port, ctx=ctx) as t:
        assert t.get("/small")[0] == 200
    assert len(tickets) == 1, f"{len(tickets)} session tickets"
