"""The README's "Try it in five minutes" block, run as written: its one ```sh block, with
three changes a test needs: the build lines (`scripts/setup`, `swift build`, `export PATH`)
are replaced by the binary under test on the PATH; the ports (8443, 3129) and the directory
(/tmp/pinproxy-try) are free ones of this run; and after each command that starts a server
in the background, or reloads, the script waits (polling) until it is up or done.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from proxy_harness import REPO, TIMEOUT, clean_env, free_port

SECTION = "## Try it in five minutes"

PRELUDE = r"""
set -eu  # no pipefail: the README pipes a refused curl into grep
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
pp_wait_port() {  # PORT: until something accepts on 127.0.0.1:PORT
    for _ in $(seq 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "nothing listens on port $1" >&2; return 1
}
pp_wait_reload() {  # until the daemon has logged one more event=reload than before
    for _ in $(seq 200); do
        [ "$(grep -c 'event=reload' "$PP_LOG" || true)" -gt "$1" ] && return 0
        sleep 0.05
    done
    echo "no event=reload" >&2; return 1
}
"""


def readme_block() -> str:
    text = (REPO / "README.md").read_text()
    section = text[text.index(SECTION):]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


def test_try_it_in_five_minutes(pinproxy, tmp_path):
    origin_port, proxy_port = free_port(), free_port()
    log = tmp_path / "stderr.log"
    lines = []
    for line in readme_block().splitlines():
        if re.match(r"(scripts/setup|swift build|export PATH=)", line):
            continue
        line = (line.replace("/tmp/pinproxy-try", str(tmp_path / "try"))
                .replace("8443", str(origin_port)).replace("3129", str(proxy_port)))
        if line.startswith("pinproxy reload"):
            lines.append('PP_RELOADS=$(grep -c "event=reload" "$PP_LOG" || true)')
        lines.append(line)
        if "static_origin.py" in line and line.rstrip().endswith("&"):
            lines.append(f"pp_wait_port {origin_port}")
        if line.startswith("pinproxy run") and line.rstrip().endswith("&"):
            lines.append(f"pp_wait_port {proxy_port}")
        if line.startswith("pinproxy reload"):
            lines.append('pp_wait_reload "$PP_RELOADS"')
    script = PRELUDE + "\n".join(lines) + "\n"
    (tmp_path / "five-minutes.sh").write_text(script)
    env = clean_env(PATH=f"{Path(pinproxy).parent}:{os.environ['PATH']}", PP_LOG=str(log))
    with open(log, "wb") as err:
        p = subprocess.run(["bash", str(tmp_path / "five-minutes.sh")], cwd=REPO, env=env, stdout=subprocess.PIPE,
                           stderr=err, timeout=TIMEOUT * 6, stdin=subprocess.DEVNULL)
    out = p.stdout.decode()
    why = f"exit {p.returncode}\n--- stdout\n{out}\n--- stderr\n{log.read_text()}"
    assert p.returncode == 0, why
    assert "hello from the local origin" in out, why
    assert "< HTTP/1.1 403 pinproxy: pin-mismatch for www.api.test" in out, why
    assert "pinproxy refused www.api.test" in out and "Expected" in out, why
    assert ": ok" in out, why  # pinproxy check accepted the config
