"""Harness for the `pinproxy run` end-to-end tests (Tests/e2e/test_proxy_*.py).

What is here:

- ``Proxy``: one daemon.  Writes its config (from dicts, or raw text), starts
  ``pinproxy run --config FILE`` with stderr in a file, waits until the listen port
  accepts TCP, and offers ``.logs()`` (parsed event lines), ``.wait_for_log()``,
  ``.reload()`` (SIGHUP), ``.stop()`` (SIGTERM, returns the exit code), ``.ca_path``
  (from ``pinproxy ca``) and ``.client_context()`` (an ssl context trusting that CA).
- Fixtures: ``curl`` (path; fails if missing), ``origins`` (session-wide loopback
  origins, started on first use), ``make_proxy`` (function-scoped daemon factory) and
  ``module_proxies`` (module-scoped factory, for a daemon shared by a whole module).
  The binary (``pinproxy``) and PKI (``pki``) fixtures come from conftest.py.
- Clients: ``connect()`` (raw CONNECT, answer parsed, socket kept when 200),
  ``raw_exchange()`` (arbitrary bytes, answer read to EOF), ``Tunnel`` (CONNECT + TLS
  + keep-alive HTTP/1.1 over one tunnel), ``https_get()`` (http.client + set_tunnel),
  ``urllib_get()`` (urllib + ProxyHandler) and ``run_curl()``.
- ``parse_logfmt()``: a tolerant logfmt parser (key=value, key="quoted \\" value").

Fixtures defined here must be imported into the test module that uses them
(``from proxy_harness import make_proxy, origins, ...``); conftest.py is not ours.

DNS: every daemon runs, when the machine allows it, in a private mount namespace whose
/etc/resolv.conf points at 127.0.0.1 (where no DNS server listens), so a name that is
not in [resolve] fails at once without a packet leaving loopback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import origin as originlib  # noqa: E402
import pki as pkilib  # noqa: E402

#: Default bound for every wait in the suite (seconds).
TIMEOUT = 20.0
#: The host every standard scenario CONNECTs to.
API = "api.test"
ESTABLISHED = "HTTP/1.1 200 Connection established"

#: Status for every refusal reason (the contract's table).
STATUS = {
    **{
        r: 403
        for r in (
            "host-denied",
            "port-denied",
            "client-denied",
            "destination-denied",
            "destination-mismatch",
            "cleartext-denied",
            "untrusted-chain",
            "certificate-expired",
            "certificate-not-yet-valid",
            "revoked",
            "revocation-unknown",
            "custom-check",
            "hostname-mismatch",
            "pin-mismatch",
            "ct-missing",
            "tls-version",
            "no-sni",
            "capture-loop",
        )
    },
    "bad-request": 400,
    "dns-failure": 502,
    "upstream-unreachable": 502,
    "handshake-failed": 502,
    "upstream-timeout": 504,
}

# The `error` of each reason's `Proxy-Status` (RFC 9209 Proxy Error Types).
PROXY_STATUS_ERROR = {
    **{r: "tls_certificate_error" for r in ("pin-mismatch", "untrusted-chain", "hostname-mismatch", "certificate-expired",
                                            "certificate-not-yet-valid", "revoked", "revocation-unknown", "custom-check",
                                            "ct-missing")},
    **{r: "http_request_denied" for r in ("host-denied", "port-denied", "cleartext-denied", "client-denied")},
    "handshake-failed": "tls_protocol_error",
    "tls-version": "tls_protocol_error",
    "dns-failure": "dns_error",
    "upstream-unreachable": "destination_unavailable",
    "upstream-timeout": "connection_timeout",
    "destination-denied": "destination_ip_prohibited",
    "destination-mismatch": "destination_ip_prohibited",
    "bad-request": "http_request_error",
    "no-sni": "http_request_error",
    "capture-loop": "proxy_loop_detected",
}

#: Two well-formed pins that match nothing in the PKI.
PIN_X = pkilib._b64_sha256(b"pinproxy proxy-test pin x")
PIN_Y = pkilib._b64_sha256(b"pinproxy proxy-test pin y")

_PROXY_ENV_VARS = {"http_proxy", "https_proxy", "all_proxy", "no_proxy", "ftp_proxy"}


def clean_env(**extra: str) -> dict[str, str]:
    """os.environ without any *_proxy variable (so only the proxy a test names is used)."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in _PROXY_ENV_VARS}
    env.update(extra)
    return env


# --------------------------------------------------------------------------
# small utilities


def poll(predicate: Callable[[], Any], timeout: float = TIMEOUT, interval: float = 0.02,
         what: str = "condition") -> Any:
    """Call PREDICATE until it returns something truthy (returned); fail after TIMEOUT."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def free_port(address: str = "127.0.0.1") -> int:
    """A currently free TCP port on ADDRESS (bind port 0, read it, close)."""
    fam = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def port_accepts(port: int, address: str = "127.0.0.1", timeout: float = 1.0) -> bool:
    fam = socket.AF_INET6 if ":" in address else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect((address, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def ipv6_loopback_available() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def rss_kib(pid: int) -> int:
    """The resident memory of process PID, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------
# logfmt

_LOGFMT_TOKEN = re.compile(r'\s*([^\s=]+)(?:=("(?:[^"\\]|\\.)*"?|\S*))?')
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}


def _unquote(v: str) -> str:
    body = v[1:-1] if len(v) >= 2 and v.endswith('"') else v[1:]
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(0)), body)


def parse_logfmt(line: str) -> dict[str, str]:
    """``a=1 b="x \\" y" flag`` -> {"a": "1", "b": 'x " y', "flag": ""}.  Never raises."""
    out: dict[str, str] = {}
    pos = 0
    line = line.rstrip("\n")
    while pos < len(line):
        m = _LOGFMT_TOKEN.match(line, pos)
        if not m or m.end() == pos:
            pos += 1
            continue
        key, value = m.group(1), m.group(2)
        if value is None:
            value = ""
        elif value.startswith('"'):
            value = _unquote(value)
        out[key] = value
        pos = m.end()
    return out


class LogLine(dict):
    """One parsed log line (values as the daemon wrote them; JSON scalars made str)."""

    raw: str = ""
    index: int = 0
    is_json: bool = False

    def num(self, key: str) -> float:
        return float(self[key])


def parse_log_line(raw: str, index: int = 0) -> LogLine | None:
    """A parsed line when it is an event line (has an `event` key), else None."""
    text = raw.strip()
    if not text:
        return None
    d: dict | None = None
    is_json = False
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            d = {k: (v if isinstance(v, str) else json.dumps(v) if isinstance(v, (dict, list)) else
                     ("true" if v is True else "false" if v is False else str(v)))
                 for k, v in obj.items()}
            is_json = True
    if d is None:
        d = parse_logfmt(text)
    if "event" not in d:
        return None
    line = LogLine(d)
    line.raw = raw
    line.index = index
    line.is_json = is_json
    return line


# --------------------------------------------------------------------------
# TOML


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {v!r}")


def toml_table(header: str, keys: Mapping[str, Any]) -> str:
    lines = [header] + [f"{json.dumps(k) if not re.fullmatch(r'[A-Za-z0-9_-]+', k) else k} = {toml_value(v)}"
                        for k, v in keys.items() if v is not None]
    return "\n".join(lines) + "\n"


def render_config(proxy: Mapping[str, Any], resolve: Mapping[str, Any], default: Mapping[str, Any],
                  hosts: Mapping[str, Mapping[str, Any]]) -> str:
    parts = [toml_table("[proxy]", proxy)]
    if resolve:
        parts.append(toml_table("[resolve]", resolve))
    if default:
        parts.append(toml_table("[default]", default))
    for pattern, keys in hosts.items():
        parts.append(toml_table(f"[hosts.{json.dumps(pattern)}]", keys))
    return "\n".join(parts)


def pinned_entry(pki, *stems: str, trust: Sequence[str] = ("root-a.pem",), **extra) -> dict:
    """A host entry: chain verified to root-a, public-key pins of the given standard certs."""
    keys: dict[str, Any] = {"trust": list(trust), "pin": "public-key", "pins": [pki.spki(s) for s in stems]}
    keys.update(extra)
    return keys


# --------------------------------------------------------------------------
# DNS isolation


@functools.lru_cache(maxsize=None)
def _resolv_conf_file() -> Path:
    d = Path(os.environ.get("TMPDIR", "/tmp")) / f"pinproxy-e2e-resolv-{os.getuid()}"
    d.mkdir(parents=True, exist_ok=True)
    p = d / "resolv.conf"
    p.write_text("# pinproxy e2e: no DNS server listens here\nnameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    return p


_ISOLATE = 'mount --bind "$1" /etc/resolv.conf || exit 97; shift; exec "$@"'


@functools.lru_cache(maxsize=None)
def dns_isolation() -> str | None:
    """None when daemons can run with a loopback-only resolv.conf, else why not."""
    unshare = shutil.which("unshare")
    if not unshare:
        return "unshare(1) not found"
    rc = _resolv_conf_file()
    try:
        p = subprocess.run(
            [unshare, "--mount", "sh", "-c", _ISOLATE, "sh", str(rc), "cat", "/etc/resolv.conf"],
            capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unshare --mount failed: {e!r}"
    if p.returncode != 0 or "nameserver 127.0.0.1" not in p.stdout:
        return f"unshare --mount + bind mount of /etc/resolv.conf failed (exit {p.returncode}): {p.stderr.strip()}"
    return None


def isolated_argv(argv: Sequence[str], resolv_conf: Path | None = None) -> list[str]:
    return ["unshare", "--mount", "sh", "-c", _ISOLATE, "sh", str(resolv_conf or _resolv_conf_file()), *argv]


# --------------------------------------------------------------------------
# the daemon


class ProxyDied(AssertionError):
    pass


class Proxy:
    """One `pinproxy run` process with its own directory, config, CA and log file."""

    def __init__(
        self,
        binary: Path,
        directory: Path,
        pki,
        *,
        proxy: Mapping[str, Any] | None = None,
        resolve: Mapping[str, Any] | None = None,
        default: Mapping[str, Any] | None = None,
        hosts: Mapping[str, Mapping[str, Any]] | None = None,
        config_text: str | None = None,
        port: int | None = None,
        isolate_dns: bool = True,
        resolv_conf: Path | None = None,
    ):
        self.bin = Path(binary)
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pki = pki
        for f in pki.dir.iterdir():  # PKI files next to the config, so trust = ["root-a.pem"] works
            if f.is_file() and not (self.dir / f.name).exists():
                os.link(f, self.dir / f.name)
        self.port = port or free_port()
        self.config_path = self.dir / "pinproxy.toml"
        self.log_path = self.dir / "stderr.log"
        self.out_path = self.dir / "stdout.log"
        self.proxy_keys: dict[str, Any] = {
            "listen": [f"127.0.0.1:{self.port}"],
            "ca_dir": "ca",
            "allow_ports": [],
            "block_private_destinations": False,
            "request_timeout": 2,
            "drain_timeout": 3,
        }
        self.proxy_keys.update(proxy or {})
        self.resolve: dict[str, Any] = {API: "127.0.0.1"}
        self.resolve.update(resolve or {})
        self.default = dict(default if default is not None else {"action": "deny"})
        self.hosts = {k: dict(v) for k, v in (hosts or {}).items()}
        self.isolate_dns = isolate_dns and dns_isolation() is None
        #: The daemon's /etc/resolv.conf (loopback servers only); default: no server at all.
        self.resolv_conf = resolv_conf
        self.proc: subprocess.Popen | None = None
        self._stopped = False
        self._ca: tuple[Path, str] | None = None
        self.write_config(config_text)

    # ---- config
    def render(self) -> str:
        return render_config(self.proxy_keys, self.resolve, self.default, self.hosts)

    def write_config(self, text: str | None = None) -> Path:
        """Write TEXT (or the config rendered from the dicts) atomically."""
        text = self.render() if text is None else text
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.config_path)
        return self.config_path

    @property
    def config_text(self) -> str:
        return self.config_path.read_text()

    # ---- process
    def argv(self) -> list[str]:
        argv = [str(self.bin), "run", "--config", str(self.config_path)]
        return isolated_argv(argv, self.resolv_conf) if self.isolate_dns else argv

    def start(self, wait: bool = True) -> "Proxy":
        err = open(self.log_path, "ab")
        out = open(self.out_path, "ab")
        try:
            self.proc = subprocess.Popen(
                self.argv(), cwd=self.dir, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                env=clean_env(),
            )
        finally:
            err.close()
            out.close()
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = TIMEOUT) -> None:
        def ready():
            self.assert_alive("while starting")
            return port_accepts(self.port)

        poll(ready, timeout, what=f"pinproxy to accept on 127.0.0.1:{self.port}\n{self.describe()}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def assert_alive(self, when: str = "") -> None:
        if self.proc is None:
            raise ProxyDied("pinproxy was never started")
        if self.proc.poll() is not None:
            raise ProxyDied(f"pinproxy exited with {self.proc.returncode} {when}\n{self.describe()}")

    def send_signal(self, sig: int) -> None:
        assert self.proc is not None
        if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL):
            self._stopped = True  # an exit from now on is the test's doing
        self.proc.send_signal(sig)

    def reload(self, timeout: float = TIMEOUT) -> LogLine:
        """SIGHUP; returns the `event=reload` line it caused."""
        mark = self.mark()
        self.assert_alive("before SIGHUP")
        self.send_signal(signal.SIGHUP)
        return self.wait_for_log(lambda l: l.get("event") == "reload", timeout=timeout, since=mark,
                                 what="an event=reload line after SIGHUP")

    def wait_exit(self, timeout: float = TIMEOUT) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"pinproxy did not exit within {timeout:g}s\n{self.describe()}") from None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = TIMEOUT) -> int:
        """Signal SIG (default SIGTERM) and wait for the exit code; SIGKILL after TIMEOUT."""
        assert self.proc is not None
        self._stopped = True
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise AssertionError(f"pinproxy ignored signal {sig} for {timeout:g}s; killed\n{self.describe()}")
        return self.proc.returncode

    def teardown(self) -> None:
        """Stop; complain if the daemon had died on its own during the test."""
        if self.proc is None:
            return
        died = not self._stopped and self.proc.poll() is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if died:
            raise ProxyDied(f"pinproxy died during the test (exit {self.proc.returncode})\n{self.describe()}")

    # ---- CA
    def ca(self) -> tuple[Path, str]:
        """(path, PEM) from `pinproxy ca --config FILE` (first line: the path, then the PEM)."""
        if self._ca is None:
            p = subprocess.run(
                [str(self.bin), "ca", "--config", str(self.config_path)],
                cwd=self.dir, capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL,
                env=clean_env(),
            )
            assert p.returncode == 0, f"pinproxy ca failed: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
            lines = p.stdout.splitlines()
            assert lines, f"pinproxy ca printed nothing\n{p.stderr}"
            path = Path(lines[0].strip())
            if not path.is_absolute():
                path = self.dir / path
            pem = "\n".join(lines[1:]).strip() + "\n"
            assert "-----BEGIN CERTIFICATE-----" in pem, f"pinproxy ca printed no PEM:\n{p.stdout}"
            self._ca = (path, pem)
        return self._ca

    @property
    def ca_path(self) -> Path:
        return self.ca()[0]

    def client_context(self) -> ssl.SSLContext:
        """What a client that trusts the pinproxy CA uses."""
        return ssl.create_default_context(cafile=str(self.ca_path))

    # ---- logs
    def raw_lines(self) -> list[str]:
        try:
            data = self.log_path.read_bytes()
        except FileNotFoundError:
            return []
        text = data.decode("utf-8", "replace")
        # The last piece is "" after a final newline, or a line still being written: never returned.
        return text.split("\n")[:-1]

    def logs(self, since: int = 0) -> list[LogLine]:
        """Parsed event lines; SINCE is a value of .mark() (a raw line count)."""
        out = []
        for i, raw in enumerate(self.raw_lines()):
            if i < since:
                continue
            line = parse_log_line(raw, i)
            if line is not None:
                out.append(line)
        return out

    def mark(self) -> int:
        return len(self.raw_lines())

    def wait_for_log(self, predicate: Callable[[LogLine], bool], timeout: float = TIMEOUT, since: int = 0,
                     what: str = "a matching log line") -> LogLine:
        def search():
            for line in self.logs(since):
                if predicate(line):
                    return line
            return None

        def find():
            dead = self.proc is not None and self.proc.poll() is not None
            line = search()
            if line is None and dead:  # exited, and its last words did not match: no use waiting
                raise ProxyDied(f"pinproxy exited ({self.proc.returncode}) without logging {what}\n{self.describe()}")
            return line

        try:
            return poll(find, timeout, what=what)
        except ProxyDied:
            raise
        except AssertionError:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}\n{self.describe()}") from None

    def connection_log(self, client_port: int, timeout: float = TIMEOUT, event: str = "connection") -> LogLine:
        """The EVENT line of the connection from 127.0.0.1:CLIENT_PORT."""
        want = f"127.0.0.1:{client_port}"
        return self.wait_for_log(lambda l: l.get("event") == event and l.get("client") == want, timeout,
                                 what=f"event={event} client={want}")

    def describe(self, tail: int = 40) -> str:
        lines = self.raw_lines()
        code = None if self.proc is None else self.proc.poll()
        return (f"--- pinproxy (pid {self.proc.pid if self.proc else '-'}, exit {code}) "
                f"config {self.config_path}:\n{self.config_path.read_text() if self.config_path.exists() else ''}"
                f"--- last {min(tail, len(lines))} stderr lines:\n" + "\n".join(lines[-tail:]) + "\n---")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "Proxy":
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.teardown()


# --------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="session")
def curl() -> str:
    path = shutil.which("curl")
    if not path:
        pytest.fail("curl is not installed (apt-get install curl): the proxy tests use it as a real client",
                    pytrace=False)
    return path


class Origins:
    """Session-wide origins, each started on first use."""

    def __init__(self, pki):
        self.pki = pki
        self._lock = threading.Lock()
        self._made: list = []

    def _keep(self, o):
        with self._lock:
            self._made.append(o)
        return o

    def _tls(self, stem: str, key: str | None = None, **kw) -> originlib.TLSOrigin:
        return self._keep(originlib.TLSOrigin(self.pki.path(f"{stem}-chain.pem"),
                                              self.pki.path(f"{key or stem}.key"), name=stem, **kw))

    @functools.cached_property
    def api(self) -> originlib.TLSOrigin:
        """api.test / www.api.test, issued by int-a (root-a)."""
        return self._tls("api")

    @functools.cached_property
    def api_newkey(self) -> originlib.TLSOrigin:
        """api.test with a different key than `api` (same int-a)."""
        return self._tls("api-newkey")

    @functools.cached_property
    def expired(self) -> originlib.TLSOrigin:
        return self._tls("expired")

    @functools.cached_property
    def notyet(self) -> originlib.TLSOrigin:
        """api.test, valid from 2090."""
        return self._tls("notyet")

    @functools.cached_property
    def revoked(self) -> originlib.TLSOrigin:
        """api.test, listed in crl-int-a.pem."""
        return self._tls("revoked")

    @functools.cached_property
    def untrusted(self) -> originlib.TLSOrigin:
        """api.test issued by int-b (root-b)."""
        return self._tls("untrusted")

    @functools.cached_property
    def other(self) -> originlib.TLSOrigin:
        """other.test only (hostname mismatch for api.test)."""
        return self._tls("other")

    @functools.cached_property
    def ip(self) -> originlib.TLSOrigin:
        """SAN IP 127.0.0.1 and ::1, on 127.0.0.1."""
        return self._tls("ip")

    @functools.cached_property
    def ip6(self) -> originlib.TLSOrigin:
        """The ip cert, on ::1."""
        return self._tls("ip", address="::1")

    @functools.cached_property
    def tls12(self) -> originlib.TLSOrigin:
        """api chain, TLS 1.2 at most."""
        o = originlib.TLSOrigin(self.pki.path("api-chain.pem"), self.pki.path("api.key"), name="api-tls12",
                                max_tls="1.2")
        return self._keep(o)

    @functools.cached_property
    def silent(self) -> originlib.SilentOrigin:
        return self._keep(originlib.SilentOrigin())

    @functools.cached_property
    def plain(self) -> originlib.PlainHTTPOrigin:
        return self._keep(originlib.PlainHTTPOrigin())

    @functools.cached_property
    def closed(self) -> originlib.ClosedPort:
        return self._keep(originlib.ClosedPort())

    def close(self) -> None:
        for o in self._made:
            o.close()


@pytest.fixture(scope="session")
def origins(pki):
    o = Origins(pki)
    yield o
    o.close()


def proxy_factory(cls, pinproxy, pki, directory: Path):
    """Generator for factory fixtures: yields make(start=True, name=None, **kw) -> a `cls`
    daemon in its own folder under `directory`; tears every one down afterwards."""
    made: list = []

    def make(start: bool = True, name: str | None = None, **kw):
        p = cls(pinproxy, directory / (name or f"proxy{len(made)}"), pki, **kw)
        made.append(p)
        if start:
            p.start()
        return p

    yield make
    errors = []
    for p in made:
        try:
            p.teardown()
        except AssertionError as e:
            errors.append(str(e))
    if errors:
        pytest.fail("\n".join(errors), pytrace=False)


@pytest.fixture
def make_proxy(pinproxy, pki, tmp_path):
    """Factory: make_proxy(proxy=..., hosts=..., start=True) -> a started Proxy (stopped at teardown)."""
    yield from proxy_factory(Proxy, pinproxy, pki, tmp_path)


@pytest.fixture(scope="module")
def module_proxies(pinproxy, pki, tmp_path_factory):
    """Module-scoped factory, same signature as make_proxy."""
    yield from proxy_factory(Proxy, pinproxy, pki, tmp_path_factory.mktemp("proxy"))


# --------------------------------------------------------------------------
# raw HTTP to the proxy


@dataclasses.dataclass
class Answer:
    """A proxy's answer to one request: status line, headers (lower-case names), body."""

    status_line: str
    status: int
    headers: dict[str, str]
    body: bytes
    raw: bytes

    @property
    def refusal(self) -> str | None:
        return self.headers.get("pinproxy-refusal")

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def __str__(self) -> str:
        return self.raw.decode("latin-1")


def parse_answer(raw: bytes) -> Answer:
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        head, sep, body = raw.partition(b"\n\n")
    lines = head.decode("latin-1").replace("\r\n", "\n").split("\n")
    status_line = lines[0]
    m = re.match(r"HTTP/\d\.\d (\d{3})(?: |$)", status_line)
    if not m:
        raise AssertionError(f"not an HTTP status line: {status_line!r} (answer {raw[:300]!r})")
    headers: dict[str, str] = {}
    for l in lines[1:]:
        if ":" in l:
            k, v = l.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return Answer(status_line, int(m.group(1)), headers, body, raw)


def _recv_until(sock: socket.socket, marker: bytes, timeout: float) -> tuple[bytes, bool]:
    """Read until MARKER appears (return all read so far) or EOF; (data, eof)."""
    deadline = time.monotonic() + timeout
    data = b""
    while marker not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out after {timeout:g}s reading from the proxy (got {data[:300]!r})")
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data, True
        if not chunk:
            return data, True
        data += chunk
    return data, False


def read_to_eof(sock: socket.socket, timeout: float = TIMEOUT) -> tuple[bytes, str]:
    """Everything until the peer closes: (data, 'eof' | 'reset').  Fails after TIMEOUT."""
    deadline = time.monotonic() + timeout
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"connection still open after {timeout:g}s (read {data[:300]!r})")
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data, "reset"
        except socket.timeout:
            continue
        if not chunk:
            return data, "eof"
        data += chunk


@dataclasses.dataclass
class Exchange:
    """Bytes sent to the proxy and what came back before it closed the connection."""

    client_port: int
    data: bytes
    closed: str  # "eof" | "reset"
    send_error: str | None

    @property
    def answer(self) -> Answer:
        if not self.data:
            raise AssertionError(f"the proxy closed the connection ({self.closed}) without answering"
                                 + (f" (send failed: {self.send_error})" if self.send_error else ""))
        return parse_answer(self.data)


def raw_exchange(proxy_port: int, payload: bytes, timeout: float = TIMEOUT, shut_wr: bool = False) -> Exchange:
    """Send PAYLOAD to the proxy and read until it closes the connection."""
    s = socket.create_connection(("127.0.0.1", proxy_port), timeout=timeout)
    try:
        cport = s.getsockname()[1]
        err = None
        try:
            s.sendall(payload)
            if shut_wr:
                s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError) as e:  # the proxy may answer and close early
            err = repr(e)
        data, how = read_to_eof(s, timeout)
        return Exchange(cport, data, how, err)
    finally:
        s.close()


def connect_request(host: str, port: int | str, extra: Iterable[str] = ()) -> bytes:
    target = f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"
    lines = [f"CONNECT {target} HTTP/1.1", f"Host: {target}", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@dataclasses.dataclass
class Connected:
    """The answer to a CONNECT; .sock is the open tunnel when the answer was 200."""

    answer: Answer
    sock: socket.socket | None
    client_port: int
    closed: str | None = None  # for refusals: how the connection ended

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()


def connect(proxy_port: int, host: str, port: int | str, timeout: float = TIMEOUT,
            extra: Iterable[str] = (), request: bytes | None = None) -> Connected:
    """Send a CONNECT; on 200 keep the socket open, otherwise read the refusal to EOF."""
    s = socket.create_connection(("127.0.0.1", proxy_port), timeout=timeout)
    cport = s.getsockname()[1]
    try:
        s.sendall(request if request is not None else connect_request(host, port, extra))
        data, eof = _recv_until(s, b"\r\n\r\n", timeout)
        if not data:
            raise AssertionError(f"the proxy closed the connection without answering CONNECT {host}:{port}")
        head_len = data.index(b"\r\n\r\n") + 4 if b"\r\n\r\n" in data else len(data)
        ans = parse_answer(data[:head_len])
        if ans.status == 200:
            assert data[head_len:] == b"", f"bytes after the 200 answer: {data[head_len:][:100]!r}"
            return Connected(ans, s, cport)
        rest, how = (b"", "eof") if eof else read_to_eof(s, timeout)
        s.close()
        return Connected(parse_answer(data + rest), None, cport, how)
    except BaseException:
        s.close()
        raise


def expect_refusal(proxy: "Proxy", host: str, port: int | str, reason: str, **kw) -> tuple[Answer, LogLine]:
    """CONNECT HOST:PORT; assert the refusal (status, header, body, closed); return it and its log line."""
    c = connect(proxy.port, host, port, **kw)
    c.close()
    ans = c.answer
    assert ans.status != 200, f"CONNECT {host}:{port} was allowed; expected {reason}\n{proxy.describe()}"
    check_refusal(ans, reason)
    line = proxy.connection_log(c.client_port)
    check_refusal_log(line, reason, host=host, port=port)
    proxy.assert_alive(f"after refusing {reason}")
    return ans, line


def check_refusal(ans: Answer, reason: str) -> None:
    status = STATUS[reason]
    assert ans.status == status, f"expected {status} {reason}, got:\n{ans}"
    assert ans.status_line.startswith("HTTP/1.1 "), ans.status_line
    assert ans.refusal == reason, f"Pinproxy-Refusal header: expected {reason!r}, got:\n{ans}"
    assert reason in ans.text, f"the body does not mention {reason!r}:\n{ans}"
    check_proxy_status(ans.headers.get("proxy-status"), reason)


def check_proxy_status(value: str | None, reason: str, error: str | None = None) -> str:
    """VALUE is `pinproxy; error=ERROR; details="REASON: …"`, one RFC 8941 item (parsed with
    http_sfv) of at most 200 bytes; returns the details."""
    try:
        import http_sfv
    except ImportError:
        pytest.fail("http-sfv is not installed (scripts/setup --tests): it parses Proxy-Status", pytrace=False)
    assert value is not None, f"no Proxy-Status on a {reason} refusal"
    assert len(value.encode("latin-1")) <= 200, value
    item = http_sfv.Item()
    item.parse(value.encode("latin-1"))
    assert item.value == http_sfv.Token("pinproxy"), value
    assert list(item.params) == ["error", "details"], value
    assert item.params["error"] == http_sfv.Token(error or PROXY_STATUS_ERROR[reason]), value
    details = item.params["details"]
    assert isinstance(details, str) and details.startswith(f"{reason}: "), value
    return details


def check_refusal_log(line: LogLine, reason: str, host: str | None = None, port: int | str | None = None) -> None:
    assert line.get("outcome") == "refused", line.raw
    assert line.get("reason") == reason, line.raw
    assert line.get("status") == str(STATUS[reason]), line.raw
    if host is not None:
        assert line.get("host") in (host, f"[{host}]"), line.raw
    if port is not None:
        assert line.get("port") == str(port), line.raw


# --------------------------------------------------------------------------
# clients through a tunnel


def tls_client(sock: socket.socket, ctx: ssl.SSLContext, server_hostname: str | None) -> ssl.SSLSocket:
    return ctx.wrap_socket(sock, server_hostname=server_hostname)


class Tunnel:
    """CONNECT + TLS (trusting the pinproxy CA) + HTTP/1.1 keep-alive over one tunnel."""

    def __init__(self, proxy: Proxy, host: str, port: int, ctx: ssl.SSLContext | None = None,
                 timeout: float = TIMEOUT):
        self.host, self.port = host, port
        c = connect(proxy.port, host, port, timeout=timeout)
        assert c.answer.status == 200, f"CONNECT {host}:{port} refused:\n{c.answer}\n{proxy.describe()}"
        assert c.answer.status_line == ESTABLISHED, c.answer.status_line
        self.client_port = c.client_port
        self.raw = c.sock
        ctx = ctx or proxy.client_context()
        try:
            self.tls = ctx.wrap_socket(c.sock, server_hostname=host)
        except BaseException:
            c.sock.close()
            raise
        self.conn = http.client.HTTPConnection(host, port, timeout=timeout)
        self.conn.sock = self.tls

    @property
    def peer_der(self) -> bytes:
        return self.tls.getpeercert(binary_form=True)

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
        hdrs = {"Host": f"{self.host}:{self.port}"}
        hdrs.update(headers or {})
        self.conn.request(method, path, body=body, headers=hdrs)
        r = self.conn.getresponse()
        return r.status, r.read()

    def get(self, path: str) -> tuple[int, bytes]:
        return self.request("GET", path)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.tls.close()
        with contextlib.suppress(OSError):
            self.raw.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def https_get(proxy: Proxy, host: str, port: int, path: str, ctx: ssl.SSLContext | None = None,
              timeout: float = TIMEOUT) -> tuple[int, bytes, bytes, int]:
    """GET through a `Tunnel` (our CONNECT ... HTTP/1.1, then ssl + http.client):
    (status, body, peer cert DER, client port)."""
    with Tunnel(proxy, host, port, ctx=ctx, timeout=timeout) as t:
        status, body = t.get(path)
        return status, body, t.peer_der, t.client_port


def stdlib_https_get(proxy: Proxy, host: str, port: int, path: str, ctx: ssl.SSLContext | None = None,
                     timeout: float = TIMEOUT) -> tuple[int, bytes]:
    """http.client.HTTPSConnection + set_tunnel, untouched: the CONNECT is whatever this
    Python sends (HTTP/1.0 before Python 3.12, HTTP/1.1 from 3.12 on)."""
    conn = http.client.HTTPSConnection("127.0.0.1", proxy.port, context=ctx or proxy.client_context(),
                                       timeout=timeout)
    conn.set_tunnel(host, port)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


#: The contract answers `CONNECT host:port HTTP/1.0` with 400 bad-request.  Flip this if the
#: contract changes to accept it (test_proxy_bad_requests then expects 200 for HTTP/1.0, and
#: the stdlib-client tests must pass on every Python).
ACCEPT_HTTP10_CONNECT = True

#: What this interpreter's http.client (so urllib, and urllib3/requests) puts on its CONNECT line.
STDLIB_CONNECT_VERSION = "HTTP/1.1" if sys.version_info >= (3, 12) else "HTTP/1.0"
STDLIB_NOTE = (f"this Python ({sys.version.split()[0]}) sends CONNECT ... {STDLIB_CONNECT_VERSION}, which "
               "the contract refuses (400 bad-request): urllib and urllib3/requests on Python < 3.12 "
               "cannot use pinproxy (see ACCEPT_HTTP10_CONNECT in proxy_harness.py)")


def stdlib(call: Callable[[], Any]) -> Any:
    """Run a call through Python's own proxy client (http.client set_tunnel / urllib).

    Where this Python sends an HTTP/1.0 CONNECT and the contract refuses those, the call must
    fail with 400 (checked), and the test is marked xfail with the explanation."""
    if STDLIB_CONNECT_VERSION == "HTTP/1.0" and not ACCEPT_HTTP10_CONNECT:
        try:
            call()
        except OSError as e:  # urllib.error.URLError is an OSError
            assert "400" in str(e), f"expected the contract's 400 for an HTTP/1.0 CONNECT, got {e!r}"
            pytest.xfail(STDLIB_NOTE)
        raise AssertionError(f"an HTTP/1.0 CONNECT was served, but the contract refuses it: {STDLIB_NOTE}")
    return call()


def urllib_get(proxy: Proxy, url: str, ctx: ssl.SSLContext | None = None, timeout: float = TIMEOUT) -> tuple[int, bytes]:
    """urllib with ProxyHandler({'https': proxy}) and an ssl context trusting the pinproxy CA."""
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"https": proxy.url}),
        urllib.request.HTTPSHandler(context=ctx or proxy.client_context()),
    )
    with opener.open(url, timeout=timeout) as r:
        return r.status, r.read()


@dataclasses.dataclass
class CurlResult:
    exit: int
    http_code: int
    connect_code: int
    body: bytes
    stderr: str
    argv: list[str]

    def __str__(self) -> str:
        return (f"$ {' '.join(self.argv)}\nexit {self.exit}, http_code {self.http_code}, "
                f"http_connect {self.connect_code}\n--- stderr\n{self.stderr}---")


def run_curl(curl_bin: str, proxy: Proxy, url: str, *extra: str, cacert: Path | None = None,
             timeout: float = 60) -> CurlResult:
    """curl -sS -x PROXY --cacert CA URL, body to a file; -w gives http_code and http_connect."""
    out = proxy.dir / f"curl-{time.monotonic_ns()}.out"
    argv = [curl_bin, "-sS", "-x", proxy.url, "--cacert", str(cacert or proxy.ca_path),
            "-o", str(out), "-w", "%{http_code} %{http_connect}", "--max-time", str(int(timeout)),
            *extra, url]
    p = subprocess.run(argv, capture_output=True, timeout=timeout + 10, stdin=subprocess.DEVNULL, env=clean_env())
    codes = p.stdout.decode().split()
    body = out.read_bytes() if out.exists() else b""
    with contextlib.suppress(FileNotFoundError):
        out.unlink()
    return CurlResult(p.returncode, int(codes[0]) if codes else 0, int(codes[1]) if len(codes) > 1 else 0,
                      body, p.stderr.decode(errors="replace"), argv)


# --------------------------------------------------------------------------
# certificates


def load_cert(pem_or_der: bytes | str):
    from cryptography import x509

    if isinstance(pem_or_der, str):
        pem_or_der = pem_or_der.encode()
    if b"-----BEGIN" in pem_or_der:
        return x509.load_pem_x509_certificate(pem_or_der)
    return x509.load_der_x509_certificate(pem_or_der)


def san_of(cert) -> tuple[list[str], list[str]]:
    """(DNS names, IP addresses as text) of a certificate's subjectAltName."""
    from cryptography import x509

    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    return ext.get_values_for_type(x509.DNSName), [str(i) for i in ext.get_values_for_type(x509.IPAddress)]


def spki_pin(cert) -> str:
    return pkilib.spki_pin(cert)


# --------------------------------------------------------------------------
# descriptors and unanswered connects


def open_descriptors(pid: int) -> int:
    """How many descriptors process PID has open (/proc/PID/fd)."""
    return len(os.listdir(f"/proc/{pid}/fd"))


class Blackhole:
    """A loopback address:port that never answers a connect: a listener whose accept queue is
    full (filled here, never accepted), so the kernel drops every further SYN. Nothing leaves
    loopback. ``Blackhole.many(addresses)`` makes one per address, all on the same port."""

    def __init__(self, address: str = "127.0.0.1", port: int = 0):
        import select

        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind((address, port))
        self.listener.listen(0)
        self.address, self.port = address, self.listener.getsockname()[1]
        self.fillers: list[socket.socket] = []
        deadline = time.monotonic() + TIMEOUT
        while True:
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.setblocking(False)
            c.connect_ex((address, self.port))
            self.fillers.append(c)
            _, writable, _ = select.select([], [c], [], 0.3)
            if not writable:  # this SYN was dropped: the queue is full
                break
            assert time.monotonic() < deadline, "the listener's accept queue never filled"

    @classmethod
    def many(cls, addresses: Sequence[str]) -> list["Blackhole"]:
        for _ in range(20):
            made: list[Blackhole] = []
            try:
                port = free_port(addresses[0])
                for a in addresses:
                    made.append(cls(a, port))
                return made
            except OSError:  # the port is taken on another address: try another
                for b in made:
                    b.close()
        raise AssertionError(f"no port free on all of {addresses}")

    def close(self) -> None:
        for c in self.fillers:
            c.close()
        self.listener.close()
