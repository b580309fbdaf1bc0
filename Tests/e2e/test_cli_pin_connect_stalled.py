"""`pinproxy pin --connect` against a server that sends its certificates and then stalls.

The server is a real TLS 1.2 server (Python's ssl on memory BIOs) behind a relay that passes
its first flight only up to the Certificate message: the client gets ServerHello and
Certificate, and then waits for a ServerKeyExchange that never comes. `pin --connect` must
print the chain that arrived (pins and the ready-to-paste block), say on stderr that the
handshake did not complete, and exit 1.
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading

from conftest import pkilib  # noqa: F401

HANDSHAKE = 22
SERVER_HELLO, CERTIFICATE = 2, 11


class CertificateThenStall:
    """Accepts one connection; answers its ClientHello with ServerHello and Certificate only."""

    def __init__(self, chain: str, key: str):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.maximum_version = ssl.TLSVersion.TLSv1_2
        self.context.load_cert_chain(chain, key)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self.sent_certificate = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        self.held.append(conn)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = self.context.wrap_bio(incoming, outgoing, server_side=True)
        flight = b""
        while not flight:
            data = conn.recv(65536)
            if not data:
                return
            incoming.write(data)
            try:
                tls.do_handshake()
            except ssl.SSLWantReadError:
                pass
            flight = outgoing.read()
        messages = self._handshake_messages(flight)
        kept = b"".join(m for m in messages if m[0] in (SERVER_HELLO, CERTIFICATE))
        assert [m[0] for m in messages][:2] == [SERVER_HELLO, CERTIFICATE], [m[0] for m in messages]
        conn.sendall(struct.pack("!BHH", HANDSHAKE, 0x0303, len(kept)) + kept)
        self.sent_certificate.set()
        # ... and nothing more: the connection stays open until the test ends.

    @staticmethod
    def _handshake_messages(records: bytes) -> list[bytes]:
        body = b""
        while records:
            kind, _, length = struct.unpack("!BHH", records[:5])
            assert kind == HANDSHAKE, kind
            body += records[5:5 + length]
            records = records[5 + length:]
        messages = []
        while body:
            length = int.from_bytes(body[1:4], "big")
            messages.append(body[:4 + length])
            body = body[4 + length:]
        return messages

    def close(self) -> None:
        self.sock.close()
        for c in self.held:
            c.close()


def test_a_chain_that_arrived_before_a_stall_is_printed(ws, pki):
    server = CertificateThenStall(str(pki.path("api-chain.pem")), str(pki.path("api.key")))
    try:
        res = ws.pin("--connect", f"127.0.0.1:{server.port}", "--timeout", "2")
    finally:
        server.close()
    assert server.sent_certificate.is_set()
    assert res.code == 1, res
    assert "did not complete" in res.err, res
    for stem in ("api", "int-a"):
        assert f"public-key: {pki.spki(stem)}" in res.out, res
        assert f"certificate: {pki.cert(stem)}" in res.out, res
    assert '[hosts."127.0.0.1"]' in res.out, res
    assert f'"{pki.spki("api")}",  # leaf' in res.out, res
