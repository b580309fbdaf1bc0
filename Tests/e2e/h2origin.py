"""An HTTP/2-capable TLS origin for the pinproxy end-to-end tests (hypercorn, on loopback).

``H2Origin(chain, key, alpn=("h2", "http/1.1"))`` serves from a daemon thread on a port it
bound itself (``.port``), with the ALPN list it is given (in order of preference: the
server's order wins), and answers every request with JSON::

    {"http_version": "2" | "1.1", "method": ..., "path": ..., "body_len": N}

Each request's HTTP version is also kept in ``.versions``.  ``.close()`` stops it.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from pathlib import Path
from typing import Sequence

from hypercorn.asyncio import serve
from hypercorn.config import Config


class H2Origin:
    def __init__(self, chain: str | Path, key: str | Path, *, alpn: Sequence[str] = ("h2", "http/1.1"),
                 address: str = "127.0.0.1"):
        self.versions: list[str] = []
        self._lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, 0))
        self.sock.listen(128)
        self.port: int = self.sock.getsockname()[1]
        config = Config()
        config.bind = [f"fd://{self.sock.fileno()}"]
        config.certfile = str(chain)
        config.keyfile = str(key)
        config.alpn_protocols = list(alpn)
        config.accesslog = None
        config.errorlog = None
        config.graceful_timeout = 0.5
        self.sock.set_inheritable(True)
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        started = threading.Event()

        async def main():
            self._stop = asyncio.Event()
            started.set()
            await serve(self._app, config, shutdown_trigger=self._stop.wait)

        self.thread = threading.Thread(target=self._loop.run_until_complete, args=(main(),), daemon=True,
                                       name=f"h2origin-{self.port}")
        self.thread.start()
        if not started.wait(20):
            raise AssertionError("the h2 origin did not start")
        # hypercorn owns the listening socket from now on, and closes it when it stops.
        self.sock.detach()

    async def _app(self, scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body_len = 0
        while True:
            message = await receive()
            body_len += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        with self._lock:
            self.versions.append(scope["http_version"])
        body = json.dumps({"http_version": scope["http_version"], "method": scope["method"],
                           "path": scope["path"], "body_len": body_len}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
