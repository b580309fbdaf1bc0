"""Shared fixtures for the pinproxy CLI end-to-end tests.

- ``pinproxy``: path of the binary ($PINPROXY_BIN, else <repo>/.build/debug/pinproxy).
- ``pki``: the standard test PKI, built once per session.
- ``ws``: a per-test workspace directory holding (hard links to) every PKI file,
  where configs are written, plus helpers to run the binary.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import textwrap
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

import pki as pkilib  # noqa: E402

AT = pkilib.EVAL_TIME_RFC3339  # "2026-06-01T00:00:00Z"
TIMEOUT = 30

PIN_RE = r"sha256/[A-Za-z0-9+/]{43}="

# Commands run without --config read the installed config when it exists: every test sees none
# (a test of that lookup points PINPROXY_DEFAULT_CONFIG at its own file).
os.environ["PINPROXY_DEFAULT_CONFIG"] = "/nonexistent/pinproxy/pinproxy.toml"

# Two well-formed pins that match nothing in the PKI.
PIN_X = pkilib._b64_sha256(b"pinproxy test pin x")
PIN_Y = pkilib._b64_sha256(b"pinproxy test pin y")


# --------------------------------------------------------------------------
# binary


@pytest.fixture(scope="session")
def pinproxy() -> Path:
    env = os.environ.get("PINPROXY_BIN")
    path = Path(env) if env else REPO / ".build" / "debug" / "pinproxy"
    if not path.is_file() or not os.access(path, os.X_OK):
        how = "$PINPROXY_BIN" if env else "the default location (set PINPROXY_BIN to override)"
        pytest.fail(
            f"pinproxy binary not found or not executable at {path} ({how}); "
            "build it first with `swift build`",
            pytrace=False,
        )
    return path


@dataclass
class Result:
    code: int
    out: str
    err: str
    args: Sequence[str] = ()

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()

    @property
    def first(self) -> str:
        lines = self.lines
        return lines[0] if lines else ""

    @property
    def detail(self) -> str:
        return "\n".join(self.lines[1:])

    def __str__(self) -> str:  # for assertion messages
        return (
            f"$ {' '.join(map(str, self.args))}\nexit {self.code}\n"
            f"--- stdout\n{self.out}--- stderr\n{self.err}---"
        )


def run(binary: Path, *args, cwd: Path | str | None = None, timeout: int = TIMEOUT) -> Result:
    argv = [str(binary), *map(str, args)]
    p = subprocess.run(
        argv,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Result(p.returncode, p.stdout, p.stderr, argv)


# --------------------------------------------------------------------------
# PKI


class PKI:
    def __init__(self, directory: Path, certs: dict[str, pkilib.Issued]):
        self.dir = directory
        self.certs = certs
        self.pins = json.loads((directory / "pins.json").read_text())

    def path(self, name: str) -> Path:
        return self.dir / name

    def spki(self, stem: str) -> str:
        return self.pins[stem]["spki"]

    def cert(self, stem: str) -> str:
        return self.pins[stem]["cert"]

    def issued(self, stem: str) -> pkilib.Issued:
        return self.certs[stem]


@pytest.fixture(scope="session")
def deb(tmp_path_factory) -> Path:
    """The Debian package (test_package.py, test_systemd_box.py): $PINPROXY_DEB, else built once
    per session by scripts/package (a release build in .build-package, reused by the next run)."""
    given = os.environ.get("PINPROXY_DEB")
    if given:
        return Path(given)
    if shutil.which("dpkg-deb") is None:
        pytest.fail("dpkg-deb is missing: scripts/setup --tests installs dpkg-dev", pytrace=False)
    out = tmp_path_factory.mktemp("package")
    p = subprocess.run([str(REPO / "scripts/package"), str(out)], cwd=REPO, capture_output=True, text=True,
                       timeout=3600, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, f"scripts/package failed:\n{p.stderr[-4000:]}"
    return Path(p.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> PKI:
    d = tmp_path_factory.mktemp("pki")
    certs = pkilib.build_standard_set(d)
    return PKI(d, certs)


@pytest.fixture(scope="session")
def elsewhere(tmp_path_factory) -> Path:
    """An unrelated working directory: relative paths in configs must not resolve against it."""
    return tmp_path_factory.mktemp("cwd")


# --------------------------------------------------------------------------
# config text helpers


class Raw(str):
    """A TOML value written verbatim."""


def tv(v) -> str:
    """A Python value as TOML."""
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (dt.date, dt.datetime)):
        return v.isoformat()
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(tv(x) for x in v) + "]"
    raise TypeError(v)


def table(header: str, **keys) -> str:
    return "\n".join([header] + [f"{k} = {tv(v)}" for k, v in keys.items()]) + "\n"


def host(pattern: str, **keys) -> str:
    """A [hosts."PATTERN"] table."""
    return table(f"[hosts.{json.dumps(pattern)}]", **keys)


def default(**keys) -> str:
    return table("[default]", **keys)


def proxy(**keys) -> str:
    return table("[proxy]", **keys)


def spki(stem: str) -> str:
    """Placeholder for the public-key pin of a standard-set cert, filled in by Workspace.config."""
    return f"%spki:{stem}%"


def certpin(stem: str) -> str:
    """Placeholder for the certificate pin of a standard-set cert."""
    return f"%cert:{stem}%"


TAG_RE = re.compile(r"#\s*((?:@[\w-]+\s*)+)$")


def tagged_lines(text: str) -> dict[str, set[int]]:
    """{tag: {line numbers}} for lines ending in a comment like `# @a @b`."""
    tags: dict[str, set[int]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        m = TAG_RE.search(line)
        if m:
            for t in re.findall(r"@([\w-]+)", m.group(1)):
                tags.setdefault(t, set()).add(n)
    return tags


@dataclass
class Diag:
    line: int
    warning: bool
    message: str


def diagnostics(stream: str, file: str) -> list[Diag]:
    """The `FILE:LINE: [warning: ]message` lines of a stream, for FILE exactly as given."""
    out = []
    rx = re.compile(r"^" + re.escape(str(file)) + r":(\d+): (.*)$")
    for line in stream.splitlines():
        m = rx.match(line)
        if m:
            msg = m.group(2)
            out.append(Diag(int(m.group(1)), msg.startswith("warning:"), msg))
    return out


# --------------------------------------------------------------------------
# workspace


class Workspace:
    """A per-test directory with every standard PKI file (hard links) next to the configs."""

    def __init__(self, directory: Path, pki: PKI, binary: Path, cwd: Path):
        self.dir = directory
        self.pki = pki
        self.bin = binary
        self.cwd = cwd

    # files
    def path(self, name: str) -> Path:
        return self.dir / name

    def write(self, name: str, data: str | bytes) -> Path:
        p = self.dir / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            p.write_bytes(data)
        else:
            p.write_text(data)
        return p

    def fill(self, text: str) -> str:
        """Replace %spki:STEM% / %cert:STEM% placeholders with the session's pins."""

        def sub(m):
            kind, stem = m.group(1), m.group(2)
            return self.pki.pins[stem]["spki" if kind == "spki" else "cert"]

        return re.sub(r"%(spki|cert):([\w.-]+)%", sub, text)

    def config(self, text: str, name: str = "pinproxy.toml") -> Path:
        return self.write(name, self.fill(textwrap.dedent(text)))

    # running
    def run(self, *args, cwd: Path | str | None = None) -> Result:
        return run(self.bin, *args, cwd=cwd if cwd is not None else self.cwd)

    def check(self, cfg: Path | str, cwd: Path | str | None = None) -> Result:
        return self.run("check", "--config", cfg, cwd=cwd)

    def evaluate(
        self,
        cfg: Path | str,
        host: str,
        chain: str | Path,
        port: int | None = None,
        at: str | None = AT,
        staple: str | Path | None = None,
        extra: Iterable[str] = (),
    ) -> Result:
        args = ["evaluate", "--config", cfg, "--host", host]
        if port is not None:
            args += ["--port", str(port)]
        args += ["--chain", self.dir / chain]
        if at is not None:
            args += ["--at", at]
        if staple is not None:
            args += ["--staple", self.dir / staple]
        args += list(extra)
        return self.run(*args)

    def pin(self, *args) -> Result:
        return self.run("pin", *args)


@pytest.fixture
def ws(tmp_path, pki, pinproxy, elsewhere) -> Workspace:
    shutil.copytree(pki.dir, tmp_path, dirs_exist_ok=True, copy_function=os.link)
    return Workspace(tmp_path, pki, pinproxy, elsewhere)


# --------------------------------------------------------------------------
# a loopback TLS server


class TLSServer:
    """Serves a certificate chain on loopback from a thread; records the SNI of each handshake.

    The listening socket exists (bound and listening) when the constructor returns,
    so a client may connect at once.
    """

    def __init__(self, chain: Path, key: Path, addresses: Sequence[str] = ("127.0.0.1",), port: int = 0):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(str(chain), str(key))
        self.ctx.sni_callback = self._on_sni
        self.sni: list[str | None] = []
        self.handshakes = 0
        self._handshake_seen = threading.Event()
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.socks: list[socket.socket] = []
        self.port = self._bind(addresses, port)
        self.threads = [threading.Thread(target=self._serve, args=(s,), daemon=True) for s in self.socks]
        for t in self.threads:
            t.start()

    def _bind(self, addresses: Sequence[str], wanted: int = 0) -> int:
        for _attempt in range(20 if wanted == 0 else 1):
            socks = []
            port = wanted
            try:
                for addr in addresses:
                    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
                    s = socket.socket(fam, socket.SOCK_STREAM)
                    socks.append(s)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind((addr, port))
                    s.listen(8)
                    port = s.getsockname()[1]
                self.socks = socks
                return port
            except OSError:
                for s in socks:
                    s.close()
        raise RuntimeError(f"cannot bind one port on all of {addresses}")

    def _on_sni(self, sslsock, server_name, ctx):
        with self._lock:
            self.sni.append(server_name)

    def _serve(self, lsock: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = lsock.accept()
            except OSError:
                return
            conn.settimeout(TIMEOUT)
            try:
                with self.ctx.wrap_socket(conn, server_side=True) as tls:
                    with self._lock:
                        self.handshakes += 1
                    self._handshake_seen.set()
                    try:
                        while tls.recv(4096):
                            pass
                    except (OSError, ssl.SSLError):
                        pass
            except (OSError, ssl.SSLError) as e:
                with self._lock:
                    self.errors.append(repr(e))
                conn.close()

    def wait_handshake(self, timeout: float = TIMEOUT) -> bool:
        """Block until one server-side handshake has completed (or TIMEOUT passes)."""
        return self._handshake_seen.wait(timeout)

    def close(self) -> None:
        self._stop.set()
        for s in self.socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        for t in self.threads:
            t.join(TIMEOUT)


@pytest.fixture
def tls_server(pki):
    """Factory: tls_server(chain_name, key_name, addresses=...) -> TLSServer (closed at teardown)."""
    servers: list[TLSServer] = []

    def make(chain: str = "api-chain.pem", key: str = "api.key", addresses=("127.0.0.1",), port: int = 0) -> TLSServer:
        s = TLSServer(pki.path(chain), pki.path(key), addresses, port)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()
