"""A real systemd for the tests: boxes made by ../shared/tools/systemd-box (PID 1 of their own
namespaces on a throwaway overlay of this machine's root, or of PINPROXY_MINBASE_ROOT), with the
checkout and a work directory bound in.

- ``box_unavailable()``: why no box can boot here (no root, no systemd-box, no overlayfs, no
  cgroup2), or None.
- ``require_box()``: skips the calling module with that one line, or fails it under
  ``PINPROXY_REQUIRE_SYSTEMD=1`` (.ci/run sets it).
- ``Box``: ``start()``, ``run()``/``sh()`` (a command inside every namespace of the box),
  ``journal()``, ``unit()`` (``systemctl show`` as a dict), ``stop()``.

The box has its own /tmp, /run and network (``lo`` only): servers a test needs run inside it
(``spawn()``, a transient unit), never on the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Sequence

import pytest

from proxy_harness import REPO, poll

#: The box tool: $PINPROXY_SYSTEMD_BOX, else the shared copy beside the checkout.
TOOL = Path(os.environ.get("PINPROXY_SYSTEMD_BOX") or REPO.parent / "shared/tools/systemd-box")
REQUIRED = os.environ.get("PINPROXY_REQUIRE_SYSTEMD") == "1"


def box_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "not root"
    if not os.access(TOOL, os.X_OK):
        return f"no {TOOL}"
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "no overlayfs"
    if not any(line.split()[2] == "cgroup2" for line in Path("/proc/self/mounts").read_text().splitlines()):
        return "no cgroup2 mount"
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"no {tool}"
    return None


def skip_or_fail(reason: str) -> None:
    """Skip the calling module (one line), or fail it when a systemd box is required."""
    if REQUIRED:
        pytest.fail(f"PINPROXY_REQUIRE_SYSTEMD=1 but {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require_box() -> None:
    if os.environ.get("PINPROXY_SANITIZER"):
        pytest.skip("the package under systemd is tested in the plain run (its binary is not instrumented)",
                    allow_module_level=True)
    reason = box_unavailable()
    if reason:
        skip_or_fail(f"no systemd box: {reason}")


class Box:
    """One booted systemd-box."""

    def __init__(self, binds: Sequence[str] = (), root: Path | None = None):
        self.binds = list(binds)
        self.root = root
        self.id: str | None = None

    def start(self) -> "Box":
        argv = [str(TOOL), "start"]
        if self.root is not None:
            argv += ["--root", str(self.root)]
        for b in self.binds:
            argv += ["--bind", b]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            skip_or_fail(f"the systemd box did not boot: {p.stderr.strip().splitlines()[-1:] or p.returncode}")
        self.id = p.stdout.strip().splitlines()[-1]
        return self

    def stop(self) -> None:
        if self.id is not None:
            subprocess.run([str(TOOL), "stop", self.id], capture_output=True, timeout=60)
            self.id = None

    def __enter__(self) -> "Box":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- commands inside
    def run(self, *argv: str, input: str | None = None, timeout: float = 120,
            check: bool = False, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """ARGV inside the box (as root, in its namespaces), with a plain environment."""
        assert self.id, "box not started"
        environment = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
                       "DEBIAN_FRONTEND": "noninteractive", "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0"}
        environment.update(env or {})
        full = [str(TOOL), "run", self.id, "env", "-i", *(f"{k}={v}" for k, v in environment.items()), *argv]
        p = subprocess.run(full, input=input, capture_output=True, text=True, timeout=timeout)
        if check:
            assert p.returncode == 0, f"in the box: {' '.join(argv)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
        return p

    def sh(self, script: str, **kw) -> subprocess.CompletedProcess:
        return self.run("sh", "-ec", script, **kw)

    def out(self, *argv: str, **kw) -> str:
        return self.run(*argv, check=True, **kw).stdout

    def write(self, path: str, text: str, mode: str = "0644") -> None:
        self.run("sh", "-ec", f'mkdir -p "$(dirname "$1")"; cat > "$1"; chmod {mode} "$1"', "sh", path,
                 input=text, check=True)

    # ---- systemd
    def unit(self, name: str, *properties: str) -> dict[str, str]:
        """``systemctl show NAME`` (PROPERTIES only, when given) as a dict."""
        argv = ["systemctl", "show", name] + [f"--property={p}" for p in properties]
        return dict(line.split("=", 1) for line in self.out(*argv).splitlines() if "=" in line)

    def wait_active(self, name: str, timeout: float = 60) -> dict[str, str]:
        def active():
            u = self.unit(name, "ActiveState", "SubState", "MainPID", "StatusText", "InvocationID", "Result")
            assert u["ActiveState"] != "failed", f"{name} failed: {u}\n{self.journal(name)[-3000:]}"
            return u if u["ActiveState"] == "active" else None
        return poll(active, timeout, interval=0.1, what=f"{name} to be active")

    def journal(self, unit: str | None = None, *extra: str) -> str:
        argv = ["journalctl", "--no-pager", "-q", "-o", "cat"] + (["-u", unit] if unit else []) + list(extra)
        return self.run(*argv).stdout

    def journal_entries(self, unit: str, *extra: str) -> list[dict]:
        argv = ["journalctl", "--no-pager", "-q", "-o", "json", "-u", unit, *extra]
        return [json.loads(line) for line in self.out(*argv).splitlines() if line.startswith("{")]

    def spawn(self, name: str, *argv: str, properties: Sequence[str] = ()) -> None:
        """ARGV as the transient service NAME (it outlives this call; ``systemctl stop NAME``)."""
        props = [f"--property={p}" for p in properties]
        self.run("systemd-run", f"--unit={name}", "--quiet", "--collect", *props, *argv, check=True)

    def wait_port(self, port: int, address: str = "127.0.0.1", timeout: float = 30, netns: str | None = None) -> None:
        probe = ["bash", "-c", 'exec 3<>"/dev/tcp/$0/$1"', address, str(port)]   # bash: on a minbase root too
        if netns:
            probe = ["ip", "netns", "exec", netns, *probe]
        poll(lambda: self.run(*probe).returncode == 0, timeout, interval=0.1, what=f"{address}:{port} in the box")


def wait_for(predicate, timeout: float, what: str):
    """poll() with a coarser interval, for checks that run a command in the box."""
    return poll(predicate, timeout, interval=0.2, what=what)
