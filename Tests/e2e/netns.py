"""A fresh network namespace for the egress-lock tests (Tests/e2e/test_capture_*.py).

``NetNS()`` starts ``unshare -n sleep infinity`` (the namespace lives as long as that process),
brings ``lo`` up inside it, and offers:

- ``argv(ARGV)``: ARGV run inside it (``nsenter --net=...``); ``run(ARGV)`` runs it there;
- ``call(FN, ...)``: FN run on a thread of this process that has joined the namespace
  (``setns``), so that the sockets FN creates (an origin's listener, a client) live there;
- ``nft(TEXT)`` / ``ruleset()``: nftables inside it, never the host's ruleset.

Nothing a test does inside can reach another network: the namespace has only its own ``lo``.
``unavailable()`` says why the kernel refuses a namespace (the tests then skip, with that line).
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

CLONE_NEWNET = 0x40000000
TIMEOUT = 20.0

_libc = ctypes.CDLL(None, use_errno=True)


@functools.lru_cache(maxsize=None)
def unavailable() -> str | None:
    """None when the kernel lets this process make a network namespace, else why not. (A
    missing tool is no reason: scripts/setup --tests installs them, and the tests fail without.)"""
    p = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True, timeout=TIMEOUT)
    if p.returncode != 0:
        return f"the kernel forbids network namespaces here (unshare -n: {p.stderr.strip()})"
    return None


class NetNS:
    def __init__(self) -> None:
        self.holder = subprocess.Popen(["unshare", "-n", "sleep", "infinity"], stdin=subprocess.DEVNULL)
        ours = os.readlink("/proc/self/ns/net")
        self.path = f"/proc/{self.holder.pid}/ns/net"
        end = time.monotonic() + TIMEOUT
        while True:
            try:
                if os.readlink(self.path) != ours:
                    break
            except OSError:
                pass
            if self.holder.poll() is not None or time.monotonic() > end:
                raise AssertionError(f"unshare -n did not make a network namespace (exit {self.holder.poll()})")
            time.sleep(0.01)
        # Held open, so that the namespace outlives a holder that dies early.
        self.fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        self.check("ip", "link", "set", "lo", "up")

    def argv(self, argv: Sequence[str]) -> list[str]:
        return ["nsenter", f"--net={self.path}", "--", *map(str, argv)]

    def run(self, *argv: str, input: str | None = None, timeout: float = TIMEOUT, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(argv), input=input, capture_output=True, text=True, timeout=timeout,
                              stdin=None if input is not None else subprocess.DEVNULL, **kw)

    def check(self, *argv: str, input: str | None = None) -> str:
        p = self.run(*argv, input=input)
        assert p.returncode == 0, f"$ {' '.join(argv)} (in the test namespace): exit {p.returncode}\n{p.stdout}\n{p.stderr}"
        return p.stdout

    def call(self, fn: Callable[..., Any], *args, **kwargs) -> Any:
        """FN(*ARGS, **KWARGS) on a thread inside the namespace; its result, or its exception."""
        result: dict[str, Any] = {}

        def body() -> None:
            try:
                if _libc.setns(self.fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns(CLONE_NEWNET)")
                result["value"] = fn(*args, **kwargs)
            except BaseException as e:  # handed to the caller
                result["error"] = e

        t = threading.Thread(target=body, daemon=True)
        t.start()
        t.join()
        if "error" in result:
            raise result["error"]
        return result.get("value")

    def add_address(self, address: str) -> None:
        """Another address on lo (127.0.0.0/8 needs none; IPv6 ones do)."""
        self.check("ip", "addr", "add", f"{address}/128" if ":" in address else f"{address}/32", "dev", "lo", "nodad")

    def nft(self, text: str) -> None:
        self.check("nft", "-f", "-", input=text)

    def ruleset(self) -> str:
        return self.check("nft", "list", "ruleset")

    def close(self) -> None:
        if self.holder.poll() is None:
            self.holder.kill()
        self.holder.wait(TIMEOUT)
        os.close(self.fd)

    def __enter__(self) -> "NetNS":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def as_nobody(argv: Sequence[str]) -> list[str]:
    """ARGV as user and group 65534 (nobody), with no supplementary groups."""
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *map(str, argv)]


def readable_copy(path: Path, directory: Path) -> Path:
    """A copy of PATH that user nobody can read (the tests' own directories are root's)."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o755)
    target = directory / path.name
    shutil.copyfile(path, target)
    os.chmod(target, 0o644)
    return target
