"""A static HTTPS file server on loopback: the local origin behind real clients in the
end-to-end tests (a PEP 503 simple index for pip, a dumb-HTTP git repository), and the
origin of the README's "Try it in five minutes".

    python3 Tests/e2e/static_origin.py --chain CHAIN.pem --key KEY.pem [--port 8443] [--dir DIR]

serves DIR (default: a directory holding index.html) on 127.0.0.1 until interrupted.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import ssl
import sys
import tempfile
import threading
from pathlib import Path


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass


class StaticTLSOrigin:
    """Serves DIRECTORY over TLS (CHAIN, KEY) on ADDRESS, port PORT (0: any); records paths."""

    def __init__(self, directory: str | Path, chain: str | Path, key: str | Path, address: str = "127.0.0.1",
                 port: int = 0):
        self.directory = Path(directory)
        self.paths: list[str] = []
        origin = self

        class Handler(_Handler):
            def send_head(self):
                origin.paths.append(self.path)
                return super().send_head()

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(chain), str(key))
        self.server = http.server.ThreadingHTTPServer((address, port), functools.partial(Handler, directory=str(directory)))
        self.server.daemon_threads = True
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True, do_handshake_on_connect=False)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chain", required=True, help="the server's chain, leaf first (PEM)")
    parser.add_argument("--key", required=True, help="the leaf's private key (PEM)")
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--dir", help="the directory to serve")
    args = parser.parse_args(argv)
    directory = args.dir
    if directory is None:
        directory = tempfile.mkdtemp(prefix="pinproxy-origin-")
        (Path(directory) / "index.html").write_text("hello from the local origin\n")
    origin = StaticTLSOrigin(directory, args.chain, args.key, port=args.port)
    print(f"serving {directory} on https://127.0.0.1:{origin.port}/", flush=True)
    try:
        origin.thread.join()
    except KeyboardInterrupt:
        origin.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
