"""Support for Tests/e2e/test_service.py: the daemon as a service manager would run it.

- ``NotifyListener``: the service manager's end of the notify protocol — a real AF_UNIX
  SOCK_DGRAM socket at a short filesystem path or an abstract name (``@...``); every
  datagram is kept (arrival time, raw text, ordered KEY=VALUE fields).
- ``ServiceProxy``: a ``proxy_harness.Proxy`` started with extra environment
  (NOTIFY_SOCKET, WATCHDOG_USEC, JOURNAL_STREAM, LISTEN_FDS...), optionally with a
  listening socket handed over as descriptor 3, and with variables that must hold the
  daemon's own pid (LISTEN_PID, WATCHDOG_PID) set by an exec wrapper that keeps the pid.
- ``make_service_proxy``: function-scoped factory fixture (stopped at teardown).
- ``scrape()`` / ``Metrics``: GET /metrics, parsed with prometheus_client.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import pytest

from proxy_harness import (
    proxy_factory,
    TIMEOUT,
    LogLine,
    Proxy,
    ProxyDied,
    clean_env,
    isolated_argv,
    parse_log_line,
)

#: Variables a service manager sets; removed from every daemon's environment unless a test sets them.
SERVICE_VARS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID",
                "LISTEN_FDNAMES", "JOURNAL_STREAM", "INVOCATION_ID")

# Runs between the isolation wrapper and the daemon, in the daemon's own process (exec keeps
# the pid): moves a passed descriptor to 3 and sets the variables that must name that pid.
_EXEC_WRAPPER = r"""
import fcntl, json, os, sys
spec = json.loads(sys.argv[1])
fds = spec["fds"]
# Out of the way first (a source may sit where another one must go), then to 3, 4, ...
high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in fds]
for fd in fds:
    os.close(fd)
for i, fd in enumerate(high):
    os.dup2(fd, 3 + i)  # inheritable
    os.close(fd)
for name in spec["pid_vars"]:
    os.environ[name] = str(os.getpid())
os.execv(sys.argv[2], sys.argv[2:])
"""


# --------------------------------------------------------------------------
# notify protocol


@dataclasses.dataclass
class Datagram:
    at: float            # time.monotonic() at receipt
    raw: str
    fields: list[tuple[str, str]]

    @property
    def keys(self) -> list[str]:
        return [k for k, _ in self.fields]

    def get(self, key: str) -> str | None:
        for k, v in self.fields:
            if k == key:
                return v
        return None

    @property
    def status_only(self) -> bool:
        return self.keys == ["STATUS"]

    @property
    def watchdog(self) -> bool:
        return self.keys == ["WATCHDOG"]

    def __repr__(self) -> str:
        return repr(self.raw)


def parse_datagram(data: bytes, at: float) -> Datagram:
    text = data.decode("utf-8", "replace")
    fields = []
    for line in text.split("\n"):
        if not line:
            continue
        k, sep, v = line.partition("=")
        fields.append((k, v) if sep else (line, ""))
    return Datagram(at, text, fields)


class NotifyListener:
    """The receiving end of NOTIFY_SOCKET (what systemd binds at /run/systemd/notify).

    A background thread receives continuously, as a service manager does (the kernel queues
    only net.unix.max_dgram_qlen datagrams, 10 by default, before a sender blocks)."""

    _MARK = "__pinproxy_e2e_mark__"

    def __init__(self, abstract: bool = False):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._dir: str | None = None
        if abstract:
            name = f"pinproxy-e2e-notify-{os.getpid()}-{uuid.uuid4().hex[:12]}"
            self.sock.bind("\0" + name)
            self._bind_address = "\0" + name
            self.address = "@" + name
        else:
            # Short path: sun_path holds 108 bytes, pytest's tmp_path can be longer.
            self._dir = tempfile.mkdtemp(prefix="ppn-", dir="/tmp")
            path = os.path.join(self._dir, "notify")
            self.sock.bind(path)
            self._bind_address = path
            self.address = path
        self.sock.settimeout(0.1)
        self.received: list[Datagram] = []
        self._cursor = 0
        self._marks_seen: set[str] = set()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._reader, name="notify-listener", daemon=True)
        self._thread.start()

    def _reader(self) -> None:
        while not self._closed:
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            d = parse_datagram(data, time.monotonic())
            with self._cond:
                if d.raw.startswith(self._MARK):
                    self._marks_seen.add(d.raw)
                else:
                    self.received.append(d)
                self._cond.notify_all()

    def _wait(self, predicate: Callable[[], Any], timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                value = predicate()
                left = deadline - time.monotonic()
                if value or left <= 0:
                    return value
                self._cond.wait(min(left, 0.1))

    def drain(self) -> list[Datagram]:
        """Wait until every datagram sent before this call has been received (a marker sent
        now arrives after them: one queue, FIFO); returns the list so far."""
        mark = f"{self._MARK}{uuid.uuid4().hex}"
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.sendto(mark.encode(), self._bind_address)
        assert self._wait(lambda: mark in self._marks_seen, TIMEOUT), "notify listener thread stuck"
        with self._cond:
            return list(self.received)

    def next(self, timeout: float = TIMEOUT, what: str = "a notify datagram",
             skip: Callable[[Datagram], bool] = lambda d: d.status_only or d.watchdog,
             proxy: Proxy | None = None) -> Datagram:
        """The next datagram not yet returned by next() that SKIP does not discard."""
        deadline = time.monotonic() + timeout

        def take() -> Datagram | None:
            while self._cursor < len(self.received):
                d = self.received[self._cursor]
                self._cursor += 1
                if not skip(d):
                    return d
            return None

        while True:
            left = deadline - time.monotonic()
            d = self._wait(take, min(max(left, 0), 0.2))
            if d is not None:
                return d
            if proxy is not None and proxy.proc is not None and proxy.proc.poll() is not None:
                self.drain()
                with self._cond:
                    d = take()
                if d is not None:
                    return d
                raise ProxyDied(f"pinproxy exited ({proxy.proc.returncode}) before sending {what}; "
                                f"received: {self.received}\n{proxy.describe()}")
            if time.monotonic() >= deadline:
                raise AssertionError(f"timed out after {timeout:g}s waiting for {what}; received so far: "
                                     f"{self.received}" + (f"\n{proxy.describe()}" if proxy else ""))

    def collect(self, seconds: float, predicate: Callable[[Datagram], bool], want: int | None = None) -> list[Datagram]:
        """The matching datagrams that arrive within SECONDS from now (a deadline, not a sleep);
        returns early once WANT of them arrived."""
        with self._cond:
            start = len(self.received)

        def got():
            return [d for d in self.received[start:] if predicate(d)]

        if want is not None:
            self._wait(lambda: len(got()) >= want, seconds)
        else:
            self._wait(lambda: False, seconds)
        with self._cond:
            return got()

    def close(self) -> None:
        self._closed = True
        self._thread.join(5)
        self.sock.close()
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)


# --------------------------------------------------------------------------
# the daemon under a (simulated) service manager


class ServiceProxy(Proxy):
    """A Proxy with service-manager environment, optional inherited descriptors (as 3, 4, ...)
    and pid-valued variables (LISTEN_PID, WATCHDOG_PID) that name the daemon itself."""

    def __init__(self, *args, env: Mapping[str, str] | None = None, pid_vars: Iterable[str] = (),
                 inherit_fds: Iterable[int] = (), ready: str = "listening", **kw):
        super().__init__(*args, **kw)
        self.extra_env = dict(env or {})
        self.pid_vars = list(pid_vars)
        self.inherit_fds = list(inherit_fds)  # become 3, 4, ... in the daemon
        self.ready_mode = ready  # "listening" (log line), "port" (TCP probe) or "none"

    def argv(self) -> list[str]:
        argv = [str(self.bin), "run", "--config", str(self.config_path)]
        if self.pid_vars or self.inherit_fds:
            spec = json.dumps({"fds": self.inherit_fds, "pid_vars": self.pid_vars})
            argv = [sys.executable, "-c", _EXEC_WRAPPER, spec, *argv]
        return isolated_argv(argv) if self.isolate_dns else argv

    def environment(self) -> dict[str, str]:
        env = clean_env()
        for k in SERVICE_VARS:
            env.pop(k, None)
        env.update(self.extra_env)
        return env

    def start(self, wait: bool = True) -> "ServiceProxy":
        self.log_path.touch()
        err = open(self.log_path, "ab")
        out = open(self.out_path, "ab")
        try:
            self.proc = subprocess.Popen(
                self.argv(), cwd=self.dir, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                env=self.environment(),
                pass_fds=tuple(self.inherit_fds),
            )
        finally:
            err.close()
            out.close()
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = TIMEOUT) -> None:
        if self.ready_mode == "port":
            return super().wait_ready(timeout)
        if self.ready_mode == "listening":
            # No TCP probe: it would be a connection of its own (in the log and the metrics).
            self.wait_for_log(lambda l: l.get("event") == "listening", timeout,
                              what="the `listening` line (the daemon is serving)")

    def exit_code_after(self, timeout: float = TIMEOUT) -> int:
        self._stopped = True
        return self.wait_exit(timeout)


@pytest.fixture
def make_service_proxy(pinproxy, pki, tmp_path):
    """Factory: make_service_proxy(env=..., start=True, ...) -> ServiceProxy (stopped at teardown)."""
    yield from proxy_factory(ServiceProxy, pinproxy, pki, tmp_path)


def journal_stream_of(path: Path) -> str:
    st = os.stat(path)
    return f"{st.st_dev}:{st.st_ino}"


def event_lines(proxy: Proxy) -> list[tuple[str, LogLine]]:
    """(priority prefix or "", parsed line) for every event line, a `<N>` prefix removed before parsing."""
    out = []
    for i, raw in enumerate(proxy.raw_lines()):
        prefix = ""
        body = raw
        if len(raw) >= 3 and raw[0] == "<" and raw[2] == ">" and raw[1].isdigit():
            prefix, body = raw[:3], raw[3:]
        line = parse_log_line(body, i)
        if line is not None:
            line.raw = raw
            out.append((prefix, line))
    return out


# --------------------------------------------------------------------------
# metrics


def prometheus_parser():
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        pytest.fail("prometheus_client is not installed (pip install prometheus-client): the metrics "
                    "tests parse /metrics with it", pytrace=False)
    return text_string_to_metric_families


def http_get(port: int, path: str, timeout: float = TIMEOUT) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


class Metrics:
    """One parsed scrape: families by name, and sample lookup by name + labels."""

    def __init__(self, text: str):
        self.text = text
        parse = prometheus_parser()
        self.families = {f.name: f for f in parse(text)}
        self.samples = [s for f in self.families.values() for s in f.samples]

    def find(self, name: str, **labels: str) -> list[Any]:
        return [s for s in self.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]

    def value(self, name: str, **labels: str) -> float | None:
        """The one sample NAME{LABELS...} (LABELS a subset); None when absent; fails when ambiguous."""
        found = self.find(name, **labels)
        assert len(found) <= 1, f"{len(found)} samples match {name}{labels}: {found}\n{self.text}"
        return found[0].value if found else None

    def __str__(self) -> str:
        return self.text


def scrape(port: int) -> Metrics:
    status, headers, body = http_get(port, "/metrics")
    assert status == 200, f"/metrics answered {status}: {body[:300]!r}"
    return Metrics(body.decode())
