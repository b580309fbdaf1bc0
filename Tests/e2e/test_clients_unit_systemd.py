"""`[clients."unit:…"]` at any depth, inside a real systemd (../shared/tools/systemd-box: PID 1
of its own namespaces, its own cgroup tree; the machine's own hierarchy is never touched).

A `Delegate=yes` unit moves its process 12 cgroups below its own (as CI runners and job
managers do) and asks pinproxy for two hosts: its section allows one, so the other is refused
`client-denied` and the line names the unit. A template instance is found beside 50 deep
sibling chains of another delegated unit. Before, the walk stopped at depth 6 (and ended the
whole scan there), so such clients were "no unit" and escaped their sections.

Everything runs inside the box: an `openssl s_server` origin, pinproxy as a transient service
(`action = "allow-insecure"` entries, `[resolve]` to 127.0.0.1), and curl through the proxy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from proxy_harness import parse_log_line

TOOL = Path(os.environ.get("PINPROXY_SYSTEMD_BOX") or Path(__file__).resolve().parents[3] / "shared/tools/systemd-box")

CONFIG = """
[proxy]
listen = ["127.0.0.1:3128"]
ca_dir = "{dir}/ca"
allow_ports = [8443]
block_private_destinations = false

[resolve]
"allowed.test" = "127.0.0.1"
"other.test" = "127.0.0.1"

[hosts."allowed.test"]
action = "allow-insecure"

[hosts."other.test"]
action = "allow-insecure"

[clients."unit:ci.service"]
allow = ["allowed.test"]

[clients."unit:job@7.service"]
allow = ["allowed.test"]
"""

SETUP = """
set -e
cd {dir}
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout o.key -out o.pem -days 2 -subj /CN=origin.test 2>/dev/null
systemd-run --quiet --unit=origin-test.service --working-directory={dir} openssl s_server -accept 8443 -cert o.pem -key o.key -www -quiet
systemd-run --quiet --unit=pinproxy-test.service {bin} run --config {dir}/pinproxy.toml
for i in $(seq 100); do
    curl -s -o /dev/null http://127.0.0.1:3128/ && exit 0
    sleep 0.1
done
exit 1
"""

# $1: how many levels below its unit's cgroup the client moves; the rest: hosts to fetch.
CLIENT = """
unit=$(sed -n 's|^0::||p' /proc/self/cgroup)
deep=/sys/fs/cgroup$unit
for i in $(seq "$1"); do deep="$deep/level$i"; done
mkdir -p "$deep"
echo $$ > "$deep/cgroup.procs"
shift
for host in "$@"; do
    curl -sk -o /dev/null -w "$host %{http_connect} %{http_code}\\n" --max-time 20 -x http://127.0.0.1:3128 "https://$host:8443/"
done
"""

# 50 sibling chains, 10 deep, below the unit's own cgroup; then it stays.
NOISE = """
base=/sys/fs/cgroup$(sed -n 's|^0::||p' /proc/self/cgroup)
for chain in $(seq 50); do mkdir -p "$base/chain$chain/a/b/c/d/e/f/g/h/i/j"; done
mkdir -p "$base/main" && echo $$ > "$base/main/cgroup.procs"
touch {dir}/noise-ready
exec sleep 600
"""


def box_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if not TOOL.is_file():
        return f"no {TOOL}"
    if not shutil.which("unshare") or not shutil.which("openssl"):
        return "needs unshare and openssl"
    return None


@pytest.fixture
def box(tmp_path, pinproxy):
    why = box_unavailable()
    if why:
        pytest.skip(why)
    work = Path(tmp_path / "box")
    work.mkdir()
    started = subprocess.run([str(TOOL), "start", "--bind", str(work), "--bind", str(Path(pinproxy).parent)],
                             capture_output=True, text=True, timeout=120)
    if started.returncode != 0:
        pytest.skip(f"systemd-box cannot boot here: {started.stderr.strip()}")
    box_id = started.stdout.strip().splitlines()[-1]

    def run(*argv: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        p = subprocess.run([str(TOOL), "run", box_id, *argv], capture_output=True, text=True, timeout=timeout)
        if check:
            assert p.returncode == 0, f"{argv}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
        return p

    (work / "pinproxy.toml").write_text(CONFIG.format(dir=work))
    (work / "setup.sh").write_text(SETUP.format(dir=work, bin=pinproxy))
    (work / "client.sh").write_text(CLIENT)
    (work / "noise.sh").write_text(NOISE.format(dir=work))
    try:
        run("bash", str(work / "setup.sh"))
        yield run, work
    finally:
        subprocess.run([str(TOOL), "stop", box_id], capture_output=True, timeout=60)


def decisions(run) -> list:
    out = run("journalctl", "-u", "pinproxy-test.service", "--no-pager", "-o", "cat").stdout
    return [l for l in (parse_log_line(raw) for raw in out.splitlines()) if l and l.get("event") == "connection" and l.get("host")]


def fetch(run, work: Path, unit: str, depth: int, *hosts: str) -> dict[str, str]:
    """HOSTS fetched from unit UNIT, DEPTH cgroups below its own: each host's CONNECT status
    and response status. (A script file: systemd-run would expand `$` in a command line.)"""
    p = run("systemd-run", "--quiet", f"--unit={unit}", "-p", "Delegate=yes", "--wait", "--pipe",
            "bash", str(work / "client.sh"), str(depth), *hosts)
    return {host: codes for host, codes in (line.split(" ", 1) for line in p.stdout.splitlines())}


def test_a_delegated_units_client_twelve_cgroups_down_is_that_unit(box):
    run, work = box
    assert fetch(run, work, "ci.service", 12, "other.test", "allowed.test") == {"other.test": "403 000", "allowed.test": "200 200"}
    lines = {l["host"]: l for l in decisions(run)}
    refused = lines["other.test"]
    assert (refused.get("reason"), refused.get("client_unit")) == ("client-denied", "ci.service"), refused.raw
    assert 'clients."unit:ci.service" does not allow other.test' in refused.get("detail", ""), refused.raw
    assert (lines["allowed.test"].get("outcome"), lines["allowed.test"].get("client_unit")) == ("allowed", "ci.service")


def test_a_template_instance_beside_fifty_deep_sibling_chains(box):
    run, work = box
    run("systemd-run", "--quiet", "--unit=noise.service", "-p", "Delegate=yes", "bash", str(work / "noise.sh"))
    deadline = time.monotonic() + 60
    while not (work / "noise-ready").exists():
        assert time.monotonic() < deadline, "the noise unit did not make its chains"
        time.sleep(0.1)
    assert fetch(run, work, "job@7.service", 3, "other.test", "allowed.test") == {"other.test": "403 000", "allowed.test": "200 200"}
    lines = {l["host"]: l for l in decisions(run)}
    refused = lines["other.test"]
    assert (refused.get("reason"), refused.get("client_unit")) == ("client-denied", "job@7.service"), refused.raw
    assert lines["allowed.test"].get("client_unit") == "job@7.service", lines["allowed.test"].raw
