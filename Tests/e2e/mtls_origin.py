"""A loopback origin that requires a client certificate (mutual TLS), and the client PKI for it.

``ClientPKI`` writes a client CA and two client certificates (``pinproxy-client``, what
pinproxy presents through ``client_certificate``; ``own-client``, what a tunnelled client
presents itself), each with its key (mode 0600).  ``MTLSOrigin`` serves the api.test chain
with ``CERT_REQUIRED`` against that CA: each connection's answer is ``client=<CN>`` of the
certificate it was shown.  It records, for every connection, what happened: ``client=<CN>``,
``no-bytes`` (closed before sending anything), or ``handshake-failed``; and, in ``received``,
what of a client identity reached it, whether or not the handshake then completed:
``certificate`` (a Certificate message with a certificate in it, or a CertificateVerify),
``empty`` (an empty Certificate message) or ``nothing``.  An impostor is an ``MTLSOrigin`` serving
another chain, with ``verify_mode=ssl.CERT_OPTIONAL`` (it takes whatever it is given); ``version``
holds an origin to one TLS version.
"""

from __future__ import annotations

import os
import socket
import ssl
import threading
from pathlib import Path

import pytest

import pki as pkilib

TIMEOUT = 20.0


class ClientPKI:
    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        ca = pkilib.make_root("pinproxy tests client CA", "ec")
        pkilib.write_pem(self.dir / "client-ca.pem", ca.cert)
        for stem in ("pinproxy-client", "own-client"):
            leaf = pkilib.make_leaf(stem, ca, san_dns=[], eku=["clientAuth"])
            leaf.write(self.dir, stem, ca)
            os.chmod(self.dir / f"{stem}.key", 0o600)
        self.ca = self.dir / "client-ca.pem"

    def path(self, name: str) -> Path:
        return self.dir / name


class MTLSOrigin:
    def __init__(self, chain: Path, key: Path, client_ca: Path, address: str = "127.0.0.1", port: int = 0,
                 verify_mode: ssl.VerifyMode = ssl.CERT_REQUIRED, version: ssl.TLSVersion | None = None):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(str(chain), str(key))
        self.ctx.verify_mode = verify_mode
        self.ctx.load_verify_locations(str(client_ca))
        if version is not None:
            self.ctx.minimum_version = self.ctx.maximum_version = version
        # OpenSSL's message callback (CPython's debugging hook) sees each handshake message the
        # client sends, decrypted, before any verification: what reached the origin, even when
        # the handshake then fails.
        self.ctx._msg_callback = self._message
        self._handshake = threading.local()
        self.received: list[str] = []
        self.versions: list[str] = []
        self.seen: list[str] = []
        self.lock = threading.Lock()
        self.sock = socket.create_server((address, port))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _message(self, conn, direction, version, content_type, msg_type, data):
        if direction != "read" or content_type != ssl._TLSContentType.HANDSHAKE:
            return
        # A Certificate message is 4 bytes of header, a context (TLS 1.3) and a 3-byte list
        # length: an empty one is 7 or 8 bytes, one certificate hundreds.
        if msg_type == ssl._TLSMessageType.CERTIFICATE:
            self._handshake.received = "certificate" if len(data) > 16 else "empty"
        elif msg_type == ssl._TLSMessageType.CERTIFICATE_VERIFY:
            self._handshake.received = "certificate"

    def _record(self, what: str):
        with self.lock:
            self.seen.append(what)
            self.received.append(getattr(self._handshake, "received", "nothing"))

    def _handle(self, conn: socket.socket):
        conn.settimeout(TIMEOUT)
        self._handshake.received = "nothing"
        try:
            if not conn.recv(1, socket.MSG_PEEK):
                return self._record("no-bytes")
            try:
                tls = self.ctx.wrap_socket(conn, server_side=True)
            except (ssl.SSLError, OSError):
                return self._record("handshake-failed")
            with self.lock:
                self.versions.append(tls.version())
            with tls:
                subject = dict(x[0] for x in (tls.getpeercert() or {}).get("subject", ()))
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = tls.recv(4096)
                    if not chunk:
                        break
                    head += chunk
                body = f"client={subject.get('commonName')}\n".encode()
                self._record(body.decode().strip())
                tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                            + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        except OSError:
            self._record("connection-error")
        finally:
            conn.close()

    def close(self):
        self.sock.close()



# ---- fixtures (import them by name into a test module)

@pytest.fixture
def clients(tmp_path):
    """A fresh client PKI for the test."""
    return ClientPKI(tmp_path / "clients")


@pytest.fixture
def origin(pki, clients):
    """An mTLS origin on loopback serving the api.test chain, closed after the test."""
    o = MTLSOrigin(pki.path("api-chain.pem"), pki.path("api.key"), clients.ca)
    yield o
    o.close()
