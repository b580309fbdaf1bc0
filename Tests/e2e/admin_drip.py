"""Helpers for the metrics-port tests: dripping clients and a daemon under a low open-file limit."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

from proxy_harness import Proxy

#: A request that never ends: one more header byte at each drip.
DRIP = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Drip: " + b"a" * 100_000


class LimitedProxy(Proxy):
    """A daemon started with a hard and soft open-file limit of `nofile`."""

    nofile = 1024

    def argv(self) -> list[str]:
        return ["prlimit", f"--nofile={self.nofile}:{self.nofile}", "--", *super().argv()]

    def descriptors(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))


class Drippers:
    """COUNT connections to 127.0.0.1:PORT, each sent one more byte of a request every
    INTERVAL seconds for as long as the server keeps it open; `closed` tells which the server
    has closed."""

    def __init__(self, port: int, count: int, interval: float):
        self.interval = interval
        self.socks: list[socket.socket] = []
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            self.socks.append(s)
        self.sent = [0] * count
        self.closed: set[int] = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for i, s in enumerate(self.socks):
                if i in self.closed:
                    continue
                try:
                    data = s.recv(4096)
                    if not data:
                        self._close(i)
                        continue
                except BlockingIOError:
                    pass
                except OSError:
                    self._close(i)
                    continue
                try:
                    self.sent[i] += s.send(DRIP[self.sent[i]:self.sent[i] + 1])
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    self._close(i)
            self._stop.wait(self.interval)

    def _close(self, i: int) -> None:
        with self._lock:
            self.closed.add(i)

    def all_closed(self) -> bool:
        with self._lock:
            return len(self.closed) == len(self.socks)

    def close(self) -> None:
        self._stop.set()
        self.thread.join(10)
        for s in self.socks:
            s.close()
