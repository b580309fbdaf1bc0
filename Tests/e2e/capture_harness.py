"""Harness for the egress-lock tests (test_capture_transparent.py, test_capture_egress.py).

Every scenario runs in a fresh network namespace (``netns.NetNS``): the daemon (as root, with
``[capture] exempt_users = ["root"]`` and ``local = true``, since the origins listen on loopback),
the origins (threads of this process whose sockets were made inside the namespace), nftables,
and the clients, which run as user nobody (``setpriv``) with no proxy variable at all: only the
egress lock can send them to pinproxy.

- ``capture`` fixture: a ``Capture`` with ``.ns``, ``.origin(...)``, ``.proxy(...)``,
  ``.curl(...)``, ``.client(...)`` and ``.public`` (a directory user nobody can read).
- ``CaptureProxy``: ``proxy_harness.Proxy`` run inside the namespace, with a ``[capture]`` table.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import pytest

import netns as netnslib
import origin as originlib
from proxy_harness import Proxy, clean_env, poll, port_accepts, render_config, toml_table
from service_support import scrape

TIMEOUT = 20.0
#: Where the transparent listeners are (the default [capture] ports, 443, go there): the
#: default, a privileged port.
TRANSPARENT_PORT = 8

EXEMPT_ROOT = {"local": True, "exempt_users": ["root"]}


class CaptureProxy(Proxy):
    """A daemon inside the namespace NS, with transparent listeners and a ``[capture]`` table."""

    def __init__(self, binary, directory, pki, *, ns: netnslib.NetNS, capture: Mapping[str, Any] | None = None,
                 resolve: Mapping[str, Any] | None = None, **kw):
        self.ns = ns
        self.capture = dict(EXEMPT_ROOT if capture is None else capture)
        proxy = {"transparent_listen": [f"127.0.0.1:{TRANSPARENT_PORT}", f"[::1]:{TRANSPARENT_PORT}"], "allow_ports": [443]}
        proxy.update(kw.pop("proxy", None) or {})
        super().__init__(binary, directory, pki, proxy=proxy, **kw)
        # No name resolves by default: the client's own address is the upstream's.
        self.resolve = dict(resolve or {})
        self.write_config()

    def render(self) -> str:
        return render_config(self.proxy_keys, self.resolve, self.default, self.hosts) + "\n" + toml_table("[capture]", self.capture)

    def argv(self) -> list[str]:
        return self.ns.argv(super().argv())

    def wait_ready(self, timeout: float = TIMEOUT) -> None:
        def ready():
            self.assert_alive("while starting")
            return self.ns.call(port_accepts, self.port) and self.ns.call(port_accepts, TRANSPARENT_PORT)

        poll(ready, timeout, what=f"pinproxy to accept in the test namespace\n{self.describe()}")

    def egress(self, *args: str) -> subprocess.CompletedProcess:
        """``pinproxy egress ARGS --config FILE`` inside the namespace."""
        return self.ns.run(str(self.bin), "egress", *args, "--config", str(self.config_path))

    def lock(self) -> None:
        p = self.egress("apply")
        assert p.returncode == 0, f"egress apply: exit {p.returncode}\n{p.stdout}\n{p.stderr}"

    def metrics(self):
        """/metrics (``proxy={"metrics_listen": ...}``), scraped inside the namespace."""
        return self.ns.call(scrape, int(self.proxy_keys["metrics_listen"].rsplit(":", 1)[1]))

    def decisions(self, **match: str) -> list:
        """The decision lines (event=connection) whose fields include MATCH."""
        return [l for l in self.logs() if l.get("event") == "connection" and all(l.get(k) == v for k, v in match.items())]


@dataclasses.dataclass
class Fetched:
    """What a client got: its exit status, the HTTP status (0: none) and the body."""

    exit: int
    status: int
    body: str
    stderr: str

    def __str__(self) -> str:
        return f"exit {self.exit}, HTTP {self.status}\n--- body\n{self.body}\n--- stderr\n{self.stderr}---"


class Capture:
    def __init__(self, ns: netnslib.NetNS, pinproxy: Path, pki, tmp_path: Path, public: Path):
        self.ns = ns
        self.bin = pinproxy
        self.pki = pki
        self.tmp = tmp_path
        self.public = public
        self._origins: list = []
        self._proxies: list[CaptureProxy] = []

    def origin(self, stem: str, address: str = "127.0.0.1", port: int = 443, key: str | None = None) -> originlib.TLSOrigin:
        """An HTTPS origin serving STEM-chain.pem at ADDRESS:PORT inside the namespace."""
        o = self.ns.call(originlib.TLSOrigin, self.pki.path(f"{stem}-chain.pem"), self.pki.path(f"{key or stem}.key"),
                         name=stem, address=address, port=port)
        self._origins.append(o)
        return o

    def proxy(self, start: bool = True, **kw) -> CaptureProxy:
        p = CaptureProxy(self.bin, self.tmp / f"proxy{len(self._proxies)}", self.pki, ns=self.ns, **kw)
        self._proxies.append(p)
        if start:
            p.start()
        return p

    def ca(self, proxy: CaptureProxy) -> Path:
        """The proxy's CA certificate where user nobody can read it."""
        return netnslib.readable_copy(proxy.ca_path, self.public / proxy.dir.name)

    def client(self, argv: Sequence[str], hosts: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess:
        """ARGV as user nobody inside the namespace, without any proxy variable; HOSTS (name ->
        address) are what /etc/hosts says there (a private mount namespace)."""
        argv = netnslib.as_nobody(argv)
        if hosts:
            path = self.public / f"hosts-{len(os.listdir(self.public))}"
            path.write_text("".join(f"{address} {name}\n" for name, address in hosts.items()))
            path.chmod(0o644)
            argv = ["unshare", "--mount", "sh", "-c", 'mount --bind "$1" /etc/hosts || exit 97; shift; exec "$@"', "sh", str(path), *argv]
        environment = clean_env(HOME=str(self.public), **(env or {}))
        return self.ns.run(*argv, env=environment, timeout=timeout)

    def curl(self, url: str, ca: Path, resolve: str | None = None, *extra: str) -> Fetched:
        """curl URL (trusting CA; --resolve RESOLVE), as nobody, no proxy."""
        argv = ["curl", "-sS", "--cacert", str(ca), "--max-time", str(int(TIMEOUT)), "-w", "\n%{http_code}", *extra]
        if resolve:
            argv += ["--resolve", resolve]
        p = self.client([*argv, url])
        body, _, code = p.stdout.rpartition("\n")
        return Fetched(p.returncode, int(code) if code.isdigit() else 0, body, p.stderr)

    def node_fetch(self, url: str, ca: Path, hosts: Mapping[str, str]) -> Fetched:
        """Node's built-in fetch (which ignores proxy variables) of URL, trusting CA."""
        script = ("fetch(process.argv[1]).then(async r => console.log(JSON.stringify({status: r.status, body: await r.text()})))"
                  ".catch(e => console.log(JSON.stringify({status: 0, body: String(e && e.cause ? e.cause : e)})))")
        node = shutil.which("node") or "node"
        p = self.client([node, "-e", script, url], hosts=hosts, env={"NODE_EXTRA_CA_CERTS": str(ca)})
        try:
            doc = json.loads(p.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            return Fetched(p.returncode, 0, p.stdout, p.stderr)
        return Fetched(p.returncode, doc["status"], doc["body"], p.stderr)

    def close(self) -> None:
        errors = []
        for p in self._proxies:
            try:
                p.teardown()
            except AssertionError as e:
                errors.append(str(e))
        for o in self._origins:
            o.close()
        if errors:
            pytest.fail("\n".join(errors), pytrace=False)


@pytest.fixture
def public_dir():
    """A directory user nobody can read (the tests' own are root's, mode 0700)."""
    d = Path(tempfile.mkdtemp(prefix="pinproxy-capture-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def capture(pinproxy, pki, tmp_path, public_dir):
    why = netnslib.unavailable()
    if why:
        pytest.skip(why)
    with netnslib.NetNS() as ns:
        c = Capture(ns, pinproxy, pki, tmp_path, public_dir)
        try:
            yield c
        finally:
            c.close()
