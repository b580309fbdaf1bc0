"""Loopback origin servers for the pinproxy end-to-end tests.

Every server binds port 0 (or the ``port`` given) on a loopback address, exposes ``.port`` as soon as the
constructor returns (the socket is already listening), serves from daemon threads
and is shut down by ``.close()`` (or as a context manager).

- ``TLSOrigin``: HTTPS (http.server over ssl) with a configurable chain, key and
  TLS version range.  Endpoints:
    GET  /small         -> SMALL_BODY
    GET  /big           -> big_body() (8 MiB, deterministic; compare BIG_SHA256)
    GET  /bytes/N       -> N deterministic bytes (prefix of the big body pattern)
    GET  /echo, POST /echo -> JSON {method, path, headers, body_sha256, body_len, sni}
    anything else       -> 404
  Records the SNI of every handshake (``.sni``), whether it resumed a TLS session
  (``.resumed``), every request path (``.paths``) and handshake errors (``.errors``).
- ``PlainHTTPOrigin``: the same handler without TLS (a CONNECT to it fails the
  upstream handshake).
- ``SilentOrigin``: accepts TCP connections and never sends a byte.
- ``HandshakeOrigin``: TLS handshakes on one port of many loopback addresses, nothing more.
- ``ClosedPort``: a bound but not listening socket: connecting gets refused, and
  no one else can take the port while it exists.

Run ``python3 Tests/e2e/origin.py PKI_DIR`` to serve api-chain.pem on a port and
fetch /small and /big from it directly (a standalone self-check).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import socket
import socketserver
import ssl
import sys
import threading
from pathlib import Path
from typing import Sequence

SMALL_BODY = b"hello from the pinproxy test origin\n"
BIG_SIZE = 8 * 1024 * 1024

_big_lock = threading.Lock()
_big: bytes | None = None


def big_body() -> bytes:
    """8 MiB of deterministic, incompressible-looking bytes (SHA-256 counter stream)."""
    global _big
    with _big_lock:
        if _big is None:
            blocks = []
            for i in range(BIG_SIZE // 32):
                blocks.append(hashlib.sha256(i.to_bytes(8, "big")).digest())
            _big = b"".join(blocks)
            assert len(_big) == BIG_SIZE
        return _big


def big_sha256() -> str:
    return hashlib.sha256(big_body()).hexdigest()


TLS_VERSIONS = {
    None: None,
    "1.0": ssl.TLSVersion.TLSv1,
    "1.1": ssl.TLSVersion.TLSv1_1,
    "1.2": ssl.TLSVersion.TLSv1_2,
    "1.3": ssl.TLSVersion.TLSv1_3,
}


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a tunnel can carry several requests
    server_version = "pinproxy-test-origin"
    timeout = 60

    def log_message(self, format, *args):  # noqa: A002 - quiet
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/octet-stream") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _record(self) -> None:
        with self.server.origin._lock:
            self.server.origin.paths.append(self.path)

    def do_GET(self):  # noqa: N802
        self._record()
        if self.path == "/small":
            return self._send(200, SMALL_BODY, "text/plain")
        if self.path == "/big":
            return self._send(200, big_body())
        if self.path.startswith("/bytes/"):
            try:
                n = int(self.path[len("/bytes/"):])
            except ValueError:
                return self._send(400, b"bad size\n", "text/plain")
            return self._send(200, big_body()[: max(0, min(n, BIG_SIZE))])
        if self.path.startswith("/echo"):
            return self._echo(b"")
        return self._send(404, b"not found\n", "text/plain")

    do_HEAD = do_GET

    def do_POST(self):  # noqa: N802
        self._record()
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        if self.path.startswith("/echo"):
            return self._echo(body)
        return self._send(404, b"not found\n", "text/plain")

    def _echo(self, body: bytes) -> None:
        sni = getattr(self.connection, "pinproxy_sni", None)
        doc = {
            "method": self.command,
            "path": self.path,
            "headers": {k: v for k, v in self.headers.items()},
            "body_len": len(body),
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "sni": sni,
            "origin": self.server.origin.name,
        }
        self._send(200, (json.dumps(doc, sort_keys=True) + "\n").encode(), "application/json")


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, origin, address, family):
        self.origin = origin
        self.address_family = family
        super().__init__(address, _Handler)

    def server_bind(self):  # no getfqdn(): it may ask DNS
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = port

    def finish_request(self, request, client_address):
        # Runs in the per-connection thread: the TLS handshake happens here, so a
        # slow or silent client never blocks the accept loop.
        with self.origin._lock:
            self.origin.connections += 1
        ctx = self.origin.ctx
        if ctx is not None:
            request.settimeout(30)
            try:
                request = ctx.wrap_socket(request, server_side=True)
            except (OSError, ssl.SSLError) as e:
                with self.origin._lock:
                    self.origin.errors.append(repr(e))
                request.close()
                return
            with self.origin._lock:
                self.origin.handshakes += 1
                self.origin.versions.append(request.version())
                self.origin.resumed.append(request.session_reused)
        try:
            super().finish_request(request, client_address)
        except (OSError, ssl.SSLError):
            pass

    def handle_error(self, request, client_address):  # quiet: clients hang up mid-body
        pass


class _BaseHTTPOrigin:
    ctx: ssl.SSLContext | None = None

    def __init__(self, name: str, address: str, port: int = 0):
        self.name = name
        self.address = address
        self._lock = threading.Lock()
        self.paths: list[str] = []
        self.sni: list[str | None] = []
        self.errors: list[str] = []
        self.versions: list[str] = []
        self.resumed: list[bool] = []  # per handshake: whether the client resumed a session
        self.handshakes = 0
        self.connections = 0
        fam = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.server = _Server(self, (address, port), fam)
        self.port: int = self.server.server_address[1]
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
            name=f"origin-{name}",
        )
        self.thread.start()

    @property
    def url_host(self) -> str:
        return f"[{self.address}]" if ":" in self.address else self.address

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.address}:{self.port}>"


class TLSOrigin(_BaseHTTPOrigin):
    """HTTPS origin serving CHAIN (leaf first, PEM) with KEY."""

    def __init__(
        self,
        chain: str | Path,
        key: str | Path,
        *,
        name: str = "tls",
        address: str = "127.0.0.1",
        min_tls: str | None = None,
        max_tls: str | None = None,
        port: int = 0,
    ):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        if min_tls is not None:
            if min_tls in ("1.0", "1.1"):
                ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
            ctx.minimum_version = TLS_VERSIONS[min_tls]
        if max_tls is not None:
            ctx.maximum_version = TLS_VERSIONS[max_tls]
        ctx.load_cert_chain(str(chain), str(key))
        ctx.sni_callback = self._on_sni
        self.ctx = ctx
        self.chain = Path(chain)
        super().__init__(name, address, port)

    def _on_sni(self, sslsock, server_name, ctx):
        with self._lock:
            self.sni.append(server_name)
        try:
            sslsock.pinproxy_sni = server_name  # read back by /echo
        except AttributeError:
            pass


class PlainHTTPOrigin(_BaseHTTPOrigin):
    """The same endpoints over cleartext HTTP."""

    def __init__(self, *, name: str = "plain", address: str = "127.0.0.1"):
        super().__init__(name, address)


class SilentOrigin:
    """Accepts TCP connections and holds them open without ever sending a byte."""

    def __init__(self, *, name: str = "silent", address: str = "127.0.0.1"):
        self.name = name
        self.address = address
        fam = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.sock = socket.socket(fam, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, 0))
        self.sock.listen(64)
        self.port: int = self.sock.getsockname()[1]
        self._lock = threading.Lock()
        self.held: list[socket.socket] = []
        self.accepted = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"origin-{name}")
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.held.append(conn)
                self.accepted += 1

    def close(self) -> None:
        self._stop.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(10)
        with self._lock:
            for c in self.held:
                c.close()
            self.held.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class HandshakeOrigin:
    """TLS with CHAIN and KEY on one port of each of many IPv4 loopback ADDRESSES: completes
    the handshake of every connection, then closes it. Enough for a client that only judges
    the certificate (a refused CONNECT to each address as an IP literal). ``.handshakes``
    counts the completed handshakes."""

    def __init__(self, chain: str | Path, key: str | Path, addresses: Sequence[str]):
        import selectors

        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(str(chain), str(key))
        self.handshakes = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.listeners: list[socket.socket] = []
        for _ in range(20):  # a port free on every address
            probe = socket.socket()
            probe.bind((addresses[0], 0))
            self.port: int = probe.getsockname()[1]
            probe.close()
            try:
                for address in addresses:
                    s = socket.socket()
                    self.listeners.append(s)
                    s.bind((address, self.port))
                    s.listen(128)
                    s.setblocking(False)
                break
            except OSError:
                for s in self.listeners:
                    s.close()
                self.listeners.clear()
        if not self.listeners:
            raise OSError(f"no port free on all of {len(addresses)} addresses")
        self.selector = selectors.DefaultSelector()
        for s in self.listeners:
            self.selector.register(s, selectors.EVENT_READ)
        self.thread = threading.Thread(target=self._run, daemon=True, name="origin-handshakes")
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self.selector.select(timeout=0.05):
                try:
                    conn, _ = key.fileobj.accept()
                except OSError:
                    continue
                threading.Thread(target=self._handshake, args=(conn,), daemon=True).start()

    def _handshake(self, conn: socket.socket) -> None:
        conn.setblocking(True)
        conn.settimeout(10)
        try:
            with self.ctx.wrap_socket(conn, server_side=True):
                with self._lock:
                    self.handshakes += 1
        except OSError:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self.thread.join(10)
        self.selector.close()
        for s in self.listeners:
            s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class ClosedPort:
    """A port on loopback that refuses connections (bound, never listening)."""

    def __init__(self, address: str = "127.0.0.1"):
        fam = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.sock = socket.socket(fam, socket.SOCK_STREAM)
        self.sock.bind((address, 0))
        self.port: int = self.sock.getsockname()[1]

    def close(self) -> None:
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# --------------------------------------------------------------------------
# standalone self-check


def fetch_direct(origin: TLSOrigin, path: str, cafile: str | Path, server_hostname: str) -> bytes:
    """GET PATH straight from ORIGIN (no proxy), verifying its chain against CAFILE."""
    import http.client

    ctx = ssl.create_default_context(cafile=str(cafile))
    # TLS by hand, so the name sent and checked is SERVER_HOSTNAME while TCP goes to loopback.
    conn = http.client.HTTPConnection(origin.address, origin.port, timeout=30)
    raw = socket.create_connection((origin.address, origin.port), timeout=30)
    conn.sock = ctx.wrap_socket(raw, server_hostname=server_hostname)
    try:
        conn.request("GET", path, headers={"Host": server_hostname})
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{path}: HTTP {resp.status}")
        return body
    finally:
        conn.close()


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2:
        print("usage: origin.py PKI_DIR", file=sys.stderr)
        return 2
    d = Path(argv[1])
    with TLSOrigin(d / "api-chain.pem", d / "api.key", name="api") as o:
        small = fetch_direct(o, "/small", d / "root-a.pem", "api.test")
        big = fetch_direct(o, "/big", d / "root-a.pem", "api.test")
        assert small == SMALL_BODY, small
        assert hashlib.sha256(big).hexdigest() == big_sha256()
        print(f"ok: origin on 127.0.0.1:{o.port}, /small and /big ({len(big)} bytes) verified; sni={o.sni}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
