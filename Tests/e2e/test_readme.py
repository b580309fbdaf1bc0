"""The README's "Try it in five minutes" block, run as written: its one ```sh block from
`export PATH=` on, byte for byte, twice in a row in one shell, with nothing added between its
lines (no waits: the block waits for itself).

It runs in a network namespace of its own (so that its fixed ports 8443 and 3129 are free) and a
mount namespace with a fresh tmpfs on /tmp (so that its fixed /tmp/pinproxy-try is its own). Its
working directory there stands for the repository: `.build/release/pinproxy` is the binary
under test, `Tests` and `.build/python` are the repository's, bound in (a clone under /tmp
stays reachable).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from proxy_harness import REPO, TIMEOUT, clean_env

SECTION = "## Try it in five minutes"

# Run as root in the new namespaces; the tour itself comes on stdin, as pasted.
# The binary, Tests and the Python packages' virtual environment (scripts/setup) are opened
# before the tmpfs hides /tmp (where the clone may live) and bound in from those descriptors.
SETUP = r"""
set -eu
ip link set lo up
exec 3<"$PP_BINARY" 4<"$PP_REPOSITORY/Tests"
venv="$PP_REPOSITORY/.build/python"
if [ -d "$venv" ]; then exec 5<"$venv"; fi
mount -t tmpfs tmpfs /tmp
mkdir -p /tmp/repository/.build/release /tmp/repository/Tests
touch /tmp/repository/.build/release/pinproxy
mount --bind /proc/self/fd/3 /tmp/repository/.build/release/pinproxy
mount --bind /proc/self/fd/4 /tmp/repository/Tests
if [ -e /proc/self/fd/5 ]; then mkdir /tmp/repository/.build/python && mount --bind /proc/self/fd/5 /tmp/repository/.build/python; fi
exec 3<&- 4<&- 5<&-
cd /tmp/repository
exec bash -eu
"""


def readme_block() -> str:
    text = (REPO / "README.md").read_text()
    section = text[text.index(SECTION):]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


def test_try_it_in_five_minutes_twice_as_written(pinproxy):
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.fail("needs unshare(1) and ip(8) (scripts/setup --tests installs iproute2)", pytrace=False)
    block = readme_block()
    tour = block[block.index("export PATH="):]
    env = clean_env(PP_BINARY=str(Path(pinproxy).resolve()), PP_REPOSITORY=str(REPO))
    p = subprocess.run(["unshare", "--net", "--mount", "--propagation", "private", "bash", "-c", SETUP],
                       input=(tour + tour).encode(), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=TIMEOUT * 8)
    out, err = p.stdout.decode(), p.stderr.decode()
    why = f"exit {p.returncode}\n--- stdout\n{out}\n--- stderr\n{err}"
    assert p.returncode == 0, why
    assert out.count("hello from the local origin") == 2, why
    assert out.count("< HTTP/1.1 403 pinproxy: pin-mismatch for www.api.test") == 2, why
    assert out.count("pinproxy refused www.api.test") == 2 and "Expected" in out, why
    assert out.count("/tmp/pinproxy-try/pinproxy.toml: ok\n") == 2, why  # pinproxy check accepted the config
    assert out.count("has re-read it") == 2, why
