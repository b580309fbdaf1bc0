"""A real TLS 1.2 server (Python's ssl on memory BIOs) behind a relay that controls how its
first flight reaches the client: each handshake message in a record of its own, the leading ones
(ServerHello, Certificate) at once or not, and the rest never (a stall) or one byte a second (a
trickle). The certificates the client parses are the server's real ones."""

from __future__ import annotations

import socket
import ssl
import struct
import threading

HANDSHAKE = 22
SERVER_HELLO, CERTIFICATE = 2, 11


class FlightServer:
    """Accepts connections, each on a thread of its own; answers each ClientHello with the real
    server's first flight: the messages of `fast` at once, then the rest as `rest` says
    ("stall": never; "trickle": one byte a second)."""

    def __init__(self, chain: str, key: str, *, fast: tuple[int, ...], rest: str):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.maximum_version = ssl.TLSVersion.TLSv1_2
        self.context.load_cert_chain(chain, key)
        self.fast, self.rest = fast, rest
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self.sent_fast = threading.Event()
        self.trickled = threading.Event()
        self.closing = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = self.context.wrap_bio(incoming, outgoing, server_side=True)
        flight = b""
        try:
            while not flight:
                data = conn.recv(65536)
                if not data:
                    return
                incoming.write(data)
                try:
                    tls.do_handshake()
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLError:
                    pass  # an alert for the client, sent like any flight
                flight = outgoing.read()
            now, later = self._split(flight)
            if now:
                conn.sendall(now)
                self.sent_fast.set()
            if self.rest == "trickle":
                for byte in later:
                    conn.sendall(bytes([byte]))
                    self.trickled.set()
                    if self.closing.wait(1.0):
                        return
        except OSError:
            return  # the client gave up
        # ... and nothing more: the connection stays open until the test ends.

    def _split(self, flight: bytes) -> tuple[bytes, bytes]:
        """The flight as one record per handshake message: those of `fast` that lead it, and
        the rest. A flight that is not handshake records (an alert) is all rest."""
        messages = self._handshake_messages(flight)
        if messages is None:
            return b"", flight
        records = [struct.pack("!BHH", HANDSHAKE, 0x0303, len(m)) + m for m in messages]
        count = 0
        while count < len(messages) and count < len(self.fast) and messages[count][0] == self.fast[count]:
            count += 1
        assert count == len(self.fast), [m[0] for m in messages]
        return b"".join(records[:count]), b"".join(records[count:])

    @staticmethod
    def _handshake_messages(records: bytes) -> list[bytes] | None:
        body = b""
        while records:
            kind, _, length = struct.unpack("!BHH", records[:5])
            if kind != HANDSHAKE:
                return None
            body += records[5:5 + length]
            records = records[5 + length:]
        messages = []
        while body:
            length = int.from_bytes(body[1:4], "big")
            messages.append(body[:4 + length])
            body = body[4 + length:]
        return messages

    def close(self) -> None:
        self.closing.set()
        self.sock.close()
        for c in self.held:
            c.close()
