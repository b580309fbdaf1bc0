"""`pinproxy run`: bounded buffers and edge cases of names and addresses.

- A client that stops reading a large download: the daemon's memory stays bounded (the
  upstream is read only as fast as the client drains), and every byte arrives once it reads.
- A host name longer than 64 characters (the longest a certificate commonName may be) is
  intercepted: the minted leaf names it in its subjectAltName alone.
- An IPv4-mapped IPv6 literal meets the entry of its IPv4 address.
"""

from __future__ import annotations

import hashlib
import socket
import ssl
import threading
from pathlib import Path

import pytest

from proxy_harness import (
    API,
    TIMEOUT,
    check_refusal,
    connect,
    expect_refusal,
    https_get,
    make_proxy,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    pinned_entry,
    poll,
    rss_kib,
)

CHUNK = bytes(range(256)) * 4096  # 1 MiB, deterministic
STREAM_MIB = 96


class StreamingOrigin:
    """A loopback TLS origin that answers any request with STREAM_MIB MiB, as fast as the
    connection takes them, and counts what it has handed to the kernel."""

    def __init__(self, pki_dir: Path):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(pki_dir / "api-chain.pem"), str(pki_dir / "api.key"))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sent = 0
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        raw, _ = self.listener.accept()
        with self.context.wrap_socket(raw, server_side=True) as tls:
            request = b""
            while b"\r\n\r\n" not in request:
                request += tls.recv(4096)
            tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (STREAM_MIB * len(CHUNK)))
            for _ in range(STREAM_MIB):
                tls.sendall(CHUNK)
                self.sent += len(CHUNK)
        self.done.set()

    def close(self) -> None:
        self.listener.close()


def test_a_client_that_stops_reading_holds_the_upstream_back(make_proxy, pki):
    origin = StreamingOrigin(pki.dir)
    p = make_proxy(proxy={"allow_ports": [origin.port]}, resolve={API: "127.0.0.1"},
                   hosts={API: pinned_entry(pki, "api", "int-a")})
    try:
        c = connect(p.port, API, origin.port)
        assert c.answer.status == 200, c.answer
        tls = p.client_context().wrap_socket(c.sock, server_hostname=API)
        baseline = rss_kib(p.pid)
        tls.sendall(f"GET /stream HTTP/1.1\r\nHost: {API}\r\n\r\n".encode())

        # The client reads nothing: the origin must stall long before it has sent everything,
        # held back by pinproxy (a few relay buffers plus the kernel's socket buffers).
        def stalled() -> bool:
            before = origin.sent
            return origin.sent > 0 and not origin.done.wait(0.5) and origin.sent == before
        poll(stalled, timeout=TIMEOUT, what="the origin to stall behind a client that does not read")
        assert origin.sent < STREAM_MIB * len(CHUNK) // 2, f"the origin sent {origin.sent} bytes to a client that reads nothing"
        grown = rss_kib(p.pid) - baseline
        assert grown < 32 * 1024, f"pinproxy's memory grew by {grown} KiB while its client did not read"

        # Now the client reads: every byte arrives, in order.
        digest, total, head = hashlib.sha256(), 0, b""
        tls.settimeout(TIMEOUT)
        while b"\r\n\r\n" not in head:
            head += tls.recv(65536)
        header, _, body = head.partition(b"\r\n\r\n")
        assert header.startswith(b"HTTP/1.1 200"), header
        digest.update(body)
        total += len(body)
        while total < STREAM_MIB * len(CHUNK):
            data = tls.recv(1 << 20)
            if not data:
                break
            digest.update(data)
            total += len(data)
        assert total == STREAM_MIB * len(CHUNK), f"received {total} of {STREAM_MIB * len(CHUNK)} bytes"
        assert digest.hexdigest() == hashlib.sha256(CHUNK * STREAM_MIB).hexdigest()
        tls.close()
    finally:
        origin.close()


def test_a_host_name_longer_than_a_common_name_is_intercepted(make_proxy, origins, pki):
    long_host = ("a" * 60) + ".long-names." + ("b" * 20) + ".test"
    assert len(long_host) > 64
    p = make_proxy(proxy={"allow_ports": [origins.api.port]}, resolve={long_host: "127.0.0.1"},
                   hosts={long_host: {"action": "allow-insecure"}})
    status, body, peer_der, _ = https_get(p, long_host, origins.api.port, "/small")
    assert status == 200 and body
    from cryptography import x509
    leaf = x509.load_der_x509_certificate(peer_der)
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert names.critical, "a leaf without a subject name must mark its subjectAltName critical"
    assert names.value.get_values_for_type(x509.DNSName) == [long_host]


def test_an_ipv4_mapped_literal_meets_the_ipv4_entry(make_proxy, origins, pki):
    p = make_proxy(proxy={"allow_ports": [origins.api.port], "block_private_destinations": False},
                   default={"action": "allow-insecure"},
                   hosts={"127.0.0.1": {"action": "deny"}})
    c = connect(p.port, "[::ffff:127.0.0.1]", origins.api.port)
    c.close()
    check_refusal(c.answer, "host-denied")
    line = p.connection_log(c.client_port)
    assert line.get("entry") == 'hosts."127.0.0.1"', line.raw
    assert line.get("host") == "127.0.0.1", line.raw


class EchoAfterCloseOrigin:
    """A TLS origin that reads until the client's close_notify, then answers with a digest of
    what it read: it only answers a client that half-closed."""

    def __init__(self, pki_dir: Path):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(pki_dir / "api-chain.pem"), str(pki_dir / "api.key"))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        raw, _ = self.listener.accept()
        with self.context.wrap_socket(raw, server_side=True) as tls:
            received = b""
            while chunk := tls.recv(65536):
                received += chunk
            tls.sendall(b"read %d bytes, sha256 %s\n" % (len(received), hashlib.sha256(received).hexdigest().encode()))

    def close(self) -> None:
        self.listener.close()


def test_half_close_lets_the_answer_through(make_proxy, pki):
    """The client sends its data and a TLS close_notify but keeps reading: pinproxy passes the
    close_notify on to the origin and relays the origin's answer back."""
    origin = EchoAfterCloseOrigin(pki.dir)
    p = make_proxy(proxy={"allow_ports": [origin.port]}, resolve={API: "127.0.0.1"},
                   hosts={API: pinned_entry(pki, "api", "int-a")})
    try:
        c = connect(p.port, API, origin.port)
        assert c.answer.status == 200, c.answer
        sock = c.sock
        sock.settimeout(TIMEOUT)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = p.client_context().wrap_bio(incoming, outgoing, server_hostname=API)

        def flush() -> None:
            if data := outgoing.read():
                sock.sendall(data)

        def feed() -> bool:
            data = sock.recv(65536)
            if data:
                incoming.write(data)
            else:
                incoming.write_eof()
            return bool(data)

        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                flush()
                feed()
        flush()
        payload = bytes(range(256)) * 1000
        tls.write(payload)
        with pytest.raises(ssl.SSLWantReadError):
            tls.unwrap()  # sends close_notify; the peer's own comes later
        flush()

        answer = b""
        while True:
            try:
                answer += tls.read(65536)
            except ssl.SSLWantReadError:
                if not feed():
                    break
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                break
        expected = b"read %d bytes, sha256 %s\n" % (len(payload), hashlib.sha256(payload).hexdigest().encode())
        assert answer == expected, f"after a half-close the client got {answer!r}\n{p.describe()}"
        sock.close()
    finally:
        origin.close()


def test_certificate_text_cannot_forge_log_lines(make_proxy, pki, tmp_path):
    """A server's certificate subject is logged (chain=...); separators and format characters in
    it are escaped, so it can neither start a new line (U+2028, NEL, newline) nor disguise one."""
    import origin as originlib
    import pki as pkilib

    forged = "evil\u2028level=error event=reload outcome=failed\u0085\u202eX\nY"
    leaf = pkilib.make_leaf(forged, None, san_dns=[API])
    leaf.write(tmp_path, "forged", leaf)
    server = originlib.TLSOrigin(tmp_path / "forged-chain.pem", tmp_path / "forged.key", name="forged")
    try:
        p = make_proxy(proxy={"allow_ports": [server.port]}, resolve={API: "127.0.0.1"},
                       hosts={API: {"trust": ["root-a.pem"]}})
        expect_refusal(p, API, server.port, "untrusted-chain")
        raw = p.log_path.read_bytes().decode("utf-8")
        for character in ("\u2028", "\u0085", "\u202e"):
            assert character not in raw, f"U+{ord(character):04X} reached the log unescaped"
        assert all(line.startswith("time=") for line in raw.split("\n") if line), raw
        assert "\\u2028level=error event=reload" in raw, raw
    finally:
        server.close()


def test_max_tunnels_per_client_refuses_the_one_too_many(make_proxy, origins, pki):
    """`max_tunnels_per_client`: a local client (its uid: every connection of this test is
    root's) holds at most that many tunnels; the next is refused `client-limit` (429) before any
    upstream work, logged with the client and counted; a closed tunnel gives its place back."""
    import os
    import urllib.request
    from proxy_harness import free_port
    metrics_port = free_port()
    p = make_proxy(proxy={"allow_ports": [origins.api.port], "max_tunnels_per_client": 2, "metrics_listen": f"127.0.0.1:{metrics_port}"},
                   resolve={API: "127.0.0.1"}, hosts={API: {"action": "allow-insecure"}})
    held = [connect(p.port, API, origins.api.port) for _ in range(2)]
    assert [c.answer.status for c in held] == [200, 200], [str(c.answer) for c in held]
    connections_before = origins.api.connections
    _, line = expect_refusal(p, API, origins.api.port, "client-limit")
    assert origins.api.connections == connections_before, "refused before any upstream work"
    assert line.get("client_uid") == str(os.getuid()), line.raw
    assert "max_tunnels_per_client = 2" in line.get("detail", ""), line.raw
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=TIMEOUT).read().decode()
    assert any(l.startswith("pinproxy_connections_total{") and 'reason="client-limit"' in l and l.endswith(" 1.0") or
               l.startswith("pinproxy_connections_total{") and 'reason="client-limit"' in l and l.endswith(" 1")
               for l in metrics.splitlines()), metrics
    held[0].close()

    def admitted():
        c = connect(p.port, API, origins.api.port)
        c.close()
        return c.answer.status == 200
    poll(admitted, what="a place given back by a closed tunnel")
    held[1].close()
