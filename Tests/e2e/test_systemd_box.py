"""pinproxy under a real systemd, installed from its own package: one systemd box
(systemd_box.py) for the module, the .deb from scripts/package installed with `apt install
./pinproxy_….deb` (dependencies from the machine's root below the box), then the service's life
in order: enable --now (READY=1, STATUS=), a pinned CONNECT client and the journal's decision
lines, reloads good and broken, a restart under a client connecting every 10 ms, the watchdog,
the egress lock with the origin in a network namespace joined by a veth pair, the journal's
contents, `systemd-analyze security`, nobody else taking the transparent port in the phases only
systemd has (start limit hit, socket units stopped, a package upgrade, a reload: #30 item 1),
then upgrade, remove and purge; last, the watchdog again with scripts/install.sh's dynamically
linked binary.

The tests run in file order and each starts from the state the one before left (one boot, a few
seconds, instead of one per test). Skips with one line where no box can boot; fails instead
under PINPROXY_REQUIRE_SYSTEMD=1.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import pki as pkilib
from proxy_harness import REPO
from squat import SQUAT_SOCKET
from systemd_box import Box, require_box, wait_for

require_box()

CONFIG = "/etc/pinproxy/pinproxy.toml"
ORIGIN_PORT = 8443
METRICS = "127.0.0.1:9128"
#: The veth pair to the origin's namespace: traffic between two namespaces of the box only.
BOX_SIDE, ORIGIN_SIDE = "10.231.0.1", "10.231.0.2"
#: Seconds: the drop-in's WatchdogSec (the shipped 30 s would only slow the test down).
WATCHDOG = 5

#: The origin: the test PKI's leaf on ADDRESS:PORT, until stopped.
ORIGIN = """
import sys, time
sys.path.insert(0, sys.argv[1])
import origin
o = origin.TLSOrigin(sys.argv[2], sys.argv[3], name="box", address=sys.argv[4], port=int(sys.argv[5]))
time.sleep(1e9)
"""

#: Connects to the CONNECT port every 10 ms until the file argv[1] exists; prints the counts.
STEADY_CLIENT = """
import json, os, socket, sys, time
stop, port, target = sys.argv[1], int(sys.argv[2]), sys.argv[3]
counts = {"ok": 0, "refused": 0, "other": []}
while not os.path.exists(stop):
    s = socket.socket()
    s.settimeout(20)
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(f"CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n".encode())
        head = s.recv(64).decode(errors="replace")
        if head.startswith("HTTP/1.1 200"):
            counts["ok"] += 1
        else:
            counts["other"].append(head[:40])
    except ConnectionRefusedError:
        counts["refused"] += 1
    except OSError as e:
        counts["other"].append(repr(e))
    finally:
        s.close()
    time.sleep(0.01)
print(json.dumps(counts))
"""

UDP_PROBE = """
import errno, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(b"quic initial?", (sys.argv[1], 443)); print("sent")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
"""


# --------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def work(tmp_path_factory, deb) -> Path:
    """The directory bound into the box at the same path: the .deb, the PKI, scripts."""
    d = tmp_path_factory.mktemp("box")
    os.chmod(d, 0o755)
    shutil.copy(deb, d / deb.name)
    root = pkilib.make_root("pinproxy box test root")
    leaf = pkilib.make_leaf("api.test", root, san_dns=["api.test", "other.test", "egress.test"])
    pkilib.write_pem(d / "root.pem", root.cert)
    leaf.write(d, "leaf", root)
    (d / "pin").write_text(leaf.spki_pin)
    for f in d.iterdir():
        os.chmod(f, 0o644)
    return d


@pytest.fixture(scope="module")
def box(work):
    b = Box(binds=[str(REPO), str(work)])
    b.start()
    b.work = work
    try:
        yield b
    finally:
        b.stop()


def config(work: Path, *, other_pin: str | None = None, extra: str = "") -> str:
    """The test's /etc/pinproxy/pinproxy.toml: api.test pinned; other.test pinned to OTHER_PIN
    (default: a pin that matches nothing, so it is refused)."""
    pin = (work / "pin").read_text()
    other = other_pin or pkilib._b64_sha256(b"pinproxy box test: no such key")
    backup = pkilib._b64_sha256(b"pinproxy box test: a backup key kept offline")
    return f"""# pinproxy box test
[proxy]
listen = ["127.0.0.1:3128"]
allow_ports = [443, {ORIGIN_PORT}]
block_private_destinations = false
metrics_listen = "{METRICS}"
transparent_listen = ["127.0.0.1:8", "[::1]:8"]

[capture]
ports = [443]

[resolve]
"api.test" = "127.0.0.1"
"other.test" = "127.0.0.1"

[default]
action = "deny"

[hosts."api.test"]
trust = ["/etc/pinproxy/root.pem"]
pin = "public-key"
pins = ["{pin}", "{backup}"]

[hosts."other.test"]
trust = ["/etc/pinproxy/root.pem"]
pin = "public-key"
pins = ["{other}", "{backup}"]

[hosts."egress.test"]
trust = ["/etc/pinproxy/root.pem"]
pin = "public-key"
pins = ["{pin}", "{backup}"]
{extra}"""


def curl(box: Box, url: str, *extra: str, proxy: bool = True, cacert: str = "/tmp/pinproxy-ca.pem"):
    argv = ["curl", "-sS", "--max-time", "20", "--cacert", cacert, *extra]
    if proxy:
        argv += ["-x", "http://127.0.0.1:3128"]
    return box.run(*argv, url)


def metric(box: Box, name: str) -> float | None:
    text = box.out("curl", "-sS", "--max-time", "10", f"http://{METRICS}/metrics")
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def main_pid(box: Box) -> int:
    return int(box.unit("pinproxy.service", "MainPID")["MainPID"])


def reload_and_wait(box: Box, before: float) -> None:
    box.run("systemctl", "reload", "pinproxy")
    wait_for(lambda: (metric(box, "pinproxy_config_reloads_total") or 0) > before, 30, "the reload to be counted")


def reloads_total(box: Box) -> float:
    text = box.out("curl", "-sS", "--max-time", "10", f"http://{METRICS}/metrics")
    return sum(float(v) for v in re.findall(r"^pinproxy_config_reloads_total(?:\{[^}]*\})? (\S+)$", text, re.M))


# --------------------------------------------------------------------------
# install, start, decide


def test_apt_installs_the_package_and_dpkg_verifies_it(box, work, deb):
    p = box.run("apt-get", "install", "-y", "-o", "Dpkg::Options::=--force-confold",
                str(work / deb.name), timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    verify = box.run("dpkg", "--verify", "pinproxy")
    assert verify.returncode == 0 and verify.stdout == "", verify
    assert box.out("id", "-un", "pinproxy").strip() == "pinproxy"
    state = box.unit("pinproxy.service", "UnitFileState", "ActiveState")
    assert state == {"UnitFileState": "disabled", "ActiveState": "inactive"}, state


def test_enable_now_reports_ready_and_status(box, work):
    box.run("install", "-m", "0644", str(work / "root.pem"), "/etc/pinproxy/root.pem", check=True)
    box.write(CONFIG, config(work))
    box.spawn("origin", "python3", "-c", ORIGIN, str(REPO / "Tests/e2e"), str(work / "leaf-chain.pem"),
              str(work / "leaf.key"), "127.0.0.1", str(ORIGIN_PORT))
    box.wait_port(ORIGIN_PORT)
    # The transparent port is privileged: the socket units bind it and pass it to the service.
    box.run("systemctl", "enable", "--now", "pinproxy-transparent.socket", "pinproxy-transparent6.socket", check=True)
    box.run("systemctl", "enable", "--now", "pinproxy", check=True)
    u = box.wait_active("pinproxy.service")
    # Type=notify: active (running) only after READY=1; the STATUS= line is the daemon's.
    assert u["SubState"] == "running" and u["StatusText"], u
    assert "listening" in u["StatusText"] or "connections" in u["StatusText"], u["StatusText"]
    assert box.unit("pinproxy.socket", "ActiveState")["ActiveState"] == "active"
    box.sh("install -m 0644 /var/lib/pinproxy/ca.pem /tmp/pinproxy-ca.pem")


def test_a_pinned_client_passes_a_refused_one_is_told_and_journaled(box):
    ok = curl(box, f"https://api.test:{ORIGIN_PORT}/small")
    assert ok.returncode == 0 and ok.stdout == "hello from the pinproxy test origin\n", ok
    refused = curl(box, f"https://other.test:{ORIGIN_PORT}/small")
    assert refused.returncode != 0, refused
    warnings = wait_for(lambda: (j := box.journal("pinproxy", "-p", "warning")) and "host=other.test" in j and j,
                        20, "the refusal in journalctl -u pinproxy -p warning")
    refusal = [l for l in warnings.splitlines() if "event=connection" in l and "host=other.test" in l]
    assert len(refusal) == 1 and "outcome=refused reason=pin-mismatch" in refusal[0], warnings
    assert "host=api.test" not in warnings, warnings     # the allowed one is at info
    assert [l for l in box.journal("pinproxy").splitlines() if "event=connection" in l and "host=api.test" in l
            and "outcome=allowed" in l], box.journal("pinproxy")[-3000:]


def test_reload_good_takes_effect_broken_keeps_the_old_policy(box, work):
    before = reloads_total(box)
    box.write(CONFIG, config(work, other_pin=(work / "pin").read_text()))
    box.run("systemctl", "reload", "pinproxy", check=True)
    wait_for(lambda: reloads_total(box) > before, 30, "the good reload to be counted")
    assert metric(box, "pinproxy_config_last_reload_successful") == 1
    assert curl(box, f"https://other.test:{ORIGIN_PORT}/small").returncode == 0

    pid = main_pid(box)
    broken = config(work) + "\n[hosts.\"broken.test\"\npin = \n"
    box.write(CONFIG, broken)
    try:
        # systemctl reload: ExecReload= (pinproxy reload) checks the file as the service's user
        # first, so a broken one fails the reload job and is never signalled; its FILE:LINE
        # errors are in the unit's journal.
        before = reloads_total(box)
        reload = box.run("systemctl", "reload", "pinproxy")
        assert reload.returncode != 0, (reload.stdout, reload.stderr)
        journal = box.journal("pinproxy")
        assert "pinproxy.toml:" in journal, journal[-2000:]
        assert reloads_total(box) == before and metric(box, "pinproxy_config_last_reload_successful") == 1
        print(f"systemctl reload of a broken config: exit {reload.returncode} ({reload.stderr.strip()!r})")
        # A SIGHUP that bypasses it (systemctl kill): the daemon keeps its old policy and says so.
        box.run("systemctl", "kill", "-s", "HUP", "--kill-whom=main", "pinproxy", check=True)
        wait_for(lambda: reloads_total(box) > before, 30, "the broken reload to be counted")
        assert metric(box, "pinproxy_config_last_reload_successful") == 0
        assert main_pid(box) == pid and box.unit("pinproxy.service", "ActiveState")["ActiveState"] == "active"
        # The old policy stays: other.test still passes with the pin the broken file would have removed.
        assert curl(box, f"https://other.test:{ORIGIN_PORT}/small").returncode == 0
        journal = box.journal("pinproxy", "-p", "warning")
        assert "pinproxy.toml:" in journal and "reload" in journal.lower(), journal[-2000:]
    finally:
        box.write(CONFIG, config(work))
    box.run("systemctl", "reload", "pinproxy", check=True)
    wait_for(lambda: metric(box, "pinproxy_config_last_reload_successful") == 1, 30, "the repaired config")


def test_restart_under_a_client_every_10_ms_refuses_none(box, work):
    stop = "/tmp/steady-client.stop"
    box.spawn("steady-client", "sh", "-c", f'python3 -c "$0" {stop} 3128 api.test:{ORIGIN_PORT} > /tmp/steady.json',
              STEADY_CLIENT)
    wait_for(lambda: "pinproxy_connections" in box.out("curl", "-sS", f"http://{METRICS}/metrics"), 10, "metrics")
    time.sleep(0.5)  # let the client run before the restart  # noqa: a pace, not a synchronisation
    old = main_pid(box)
    box.run("systemctl", "restart", "pinproxy", check=True)
    box.wait_active("pinproxy.service")
    assert main_pid(box) != old
    time.sleep(0.5)  # and after it  # noqa
    box.run("touch", stop)
    wait_for(lambda: box.run("systemctl", "is-active", "steady-client").stdout.strip() != "active", 30,
             "the client to finish")
    counts = json.loads(box.out("cat", "/tmp/steady.json"))
    assert counts["ok"] > 10 and counts["refused"] == 0 and counts["other"] == [], counts


def test_the_watchdog_replaces_a_frozen_daemon(box):
    watchdog_replaces_frozen(box)


def watchdog_replaces_frozen(box: Box) -> None:
    """SIGSTOP the daemon: systemd aborts it after WatchdogSec and starts a new one."""
    box.write("/etc/systemd/system/pinproxy.service.d/test-watchdog.conf",
              f"[Service]\nWatchdogSec={WATCHDOG}s\nLimitCORE=0\n")
    box.run("systemctl", "daemon-reload", check=True)
    box.run("systemctl", "restart", "pinproxy", check=True)
    box.wait_active("pinproxy.service")
    frozen = main_pid(box)
    restarts = int(box.unit("pinproxy.service", "NRestarts")["NRestarts"])
    box.run("kill", "-STOP", str(frozen), check=True)
    start = time.monotonic()
    wait_for(lambda: main_pid(box) not in (0, frozen) and box.unit("pinproxy.service", "ActiveState")["ActiveState"] == "active",
             WATCHDOG + 10, f"a new pinproxy within WatchdogSec ({WATCHDOG} s) + 10 s")
    took = time.monotonic() - start
    print(f"watchdog: frozen daemon replaced after {took:.1f} s (WatchdogSec={WATCHDOG}s)")
    # systemd's restart after the watchdog's abort (the box's systemd logs nothing of its own)
    assert int(box.unit("pinproxy.service", "NRestarts")["NRestarts"]) == restarts + 1
    assert box.run("kill", "-0", str(frozen)).returncode != 0, "the frozen daemon lingers"
    journal = box.journal("pinproxy")
    assert journal.count("Backtrace took") <= 1, journal[-4000:]
    assert curl(box, f"https://api.test:{ORIGIN_PORT}/small").returncode == 0
    box.run("rm", "-rf", "/etc/systemd/system/pinproxy.service.d", check=True)
    box.run("systemctl", "daemon-reload", check=True)
    box.run("systemctl", "restart", "pinproxy", check=True)
    box.wait_active("pinproxy.service")


# --------------------------------------------------------------------------
# the egress lock


def test_the_egress_lock_pins_a_client_without_proxy_variables(box, work):
    box.sh(f"""
        ip netns add origin
        ip link add veth-box type veth peer name veth-origin netns origin
        ip addr add {BOX_SIDE}/30 dev veth-box && ip link set veth-box up
        ip -n origin addr add {ORIGIN_SIDE}/30 dev veth-origin
        ip -n origin link set veth-origin up && ip -n origin link set lo up
        echo "{ORIGIN_SIDE} egress.test" >> /etc/hosts
    """, check=True)
    box.spawn("origin-netns", "ip", "netns", "exec", "origin", "python3", "-c", ORIGIN, str(REPO / "Tests/e2e"),
              str(work / "leaf-chain.pem"), str(work / "leaf.key"), ORIGIN_SIDE, "443")
    box.wait_port(443, ORIGIN_SIDE)
    box.run("systemctl", "enable", "--now", "pinproxy-egress", check=True)
    assert "table inet pinproxy" in box.out("nft", "list", "tables")
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

    pinned = box.run(*nobody, "curl", "-sS", "--max-time", "20", "--cacert", "/tmp/pinproxy-ca.pem",
                     "https://egress.test/small")
    assert pinned.returncode == 0 and pinned.stdout.startswith("hello"), pinned
    journal = wait_for(lambda: (j := box.journal("pinproxy")) and "egress.test" in j and j, 20, "the decision line")
    assert "egress.test" in journal
    udp = box.run(*nobody, "python3", "-c", UDP_PROBE, ORIGIN_SIDE)
    assert udp.stdout.strip() != "sent", udp

    # Fail closed: pinproxy stopped, the lock stays and HTTPS fails rather than going out unpinned.
    box.run("systemctl", "stop", "pinproxy.service", "pinproxy.socket", check=True)
    assert "table inet pinproxy" in box.out("nft", "list", "tables")
    closed = box.run(*nobody, "curl", "-sS", "--max-time", "10", "--cacert", str(work / "root.pem"),
                     "https://egress.test/small")
    assert closed.returncode != 0, closed
    box.run("systemctl", "stop", "pinproxy-egress", check=True)
    assert "table inet pinproxy" not in box.out("nft", "list", "tables")
    direct = box.run(*nobody, "curl", "-sS", "--max-time", "10", "--cacert", str(work / "root.pem"),
                     "https://egress.test/small")
    assert direct.returncode == 0, direct   # the lock lifted: straight to the origin
    box.run("systemctl", "start", "pinproxy-egress", "pinproxy", check=True)
    box.wait_active("pinproxy.service")


# --------------------------------------------------------------------------
# the unit as installed


def nice_limit(box: Box) -> int:
    """The running daemon's RLIMIT_NICE (systemd grants LimitNICE= only holding CAP_SYS_RESOURCE)."""
    limits = box.out("cat", f"/proc/{main_pid(box)}/limits")
    return int(re.search(r"^Max nice priority\s+(\d+)", limits, re.M).group(1))


def test_the_journal_holds_only_pinproxy_lines(box):
    """Every line of the unit's journal is pinproxy's own log line or systemd's (PID 1)."""
    assert box.unit("pinproxy.service", "LimitNICE")["LimitNICE"] == "24"   # LimitNICE=-4
    granted = nice_limit(box) == 24
    foreign = []
    for entry in box.journal_entries("pinproxy"):
        message = entry.get("MESSAGE", "")
        if entry.get("_PID") == "1" or entry.get("_COMM") == "systemd":
            continue
        if isinstance(message, list):
            message = bytes(message).decode(errors="replace")
        if re.match(r"^(time=|\{|level=|event=)", message) or "event=" in message:
            continue
        # ExecReload='s `pinproxy reload`: its answer, or why it refused the file (journald may
        # not have read a short-lived process's command line, hence the messages too).
        if "pinproxy reload" in entry.get("_CMDLINE", "") or message.startswith((CONFIG + ":", "the config is rejected")):
            continue
        foreign.append(message)
    if not granted:
        # This machine withholds CAP_SYS_RESOURCE: libdispatch's manager thread cannot get nice -4.
        print("RLIMIT_NICE not granted here (no CAP_SYS_RESOURCE): libdispatch's line is expected")
        foreign = [m for m in foreign if not m.startswith("Failed to set thread priority for worker thread")]
    assert foreign == [], foreign


def test_systemd_analyze_security_is_no_worse_than_1_6(box):
    p = box.run("systemd-analyze", "security", "pinproxy.service")
    m = re.search(r"Overall exposure level for pinproxy\.service: (\d+\.\d+)", p.stdout)
    assert m, p.stdout[-2000:] + p.stderr
    print(f"systemd-analyze security pinproxy.service: {m.group(1)}")
    assert float(m.group(1)) <= 1.6, p.stdout


# --------------------------------------------------------------------------
# nobody else takes the transparent port, in the phases only systemd has


#: Until the file argv[2] exists, tries to listen on port argv[1] at each address ("::" with
#: IPV6_V6ONLY off, so that it covers IPv4 too), with and without SO_REUSEPORT; a bind that
#: succeeds holds the port 0.1 s and accepts what comes. After every round, argv[3] gets (by
#: rename) the rounds done, what each bind said how often, and the connections accepted.
SQUAT_LOOP = SQUAT_SOCKET + r"""
import errno, json, os, sys, time
port, stop, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
said, accepted, rounds = {}, 0, 0
while True:
    for address in SQUAT_ADDRESSES:
        for reuseport in (False, True):
            try:
                s = squat(address, reuseport, port)
            except OSError as e:
                result = errno.errorcode.get(e.errno, str(e.errno))
            else:
                result = "bound"
                s.settimeout(0.1)
                try:
                    s.accept()[0].close()
                    accepted += 1
                except OSError:
                    pass
                s.close()
            key = f"{address} reuseport={reuseport}: {result}"
            said[key] = said.get(key, 0) + 1
    rounds += 1
    with open(out + ".tmp", "w") as f:
        json.dump({"rounds": rounds, "said": said, "accepted": accepted}, f)
    os.replace(out + ".tmp", out)
    if os.path.exists(stop):
        break
    time.sleep(0.01)
"""

#: Until the file argv[3] exists, opens HTTPS to argv[1]:443 (redirected by the lock) and
#: verifies the server against pinproxy's local CA argv[2], every 20 ms. After every attempt
#: argv[4] gets the attempts, those pinproxy served, those that failed closed (by kind) and
#: those someone else served (a certificate pinproxy did not mint).
REDIRECTED_CLIENT_LOOP = r"""
import json, os, socket, ssl, sys, time
address, ca, stop, out = sys.argv[1:5]
context = ssl.create_default_context(cafile=ca)
counts = {"attempts": 0, "pinproxy": 0, "failed-closed": {}, "someone-else": []}
while True:
    counts["attempts"] += 1
    try:
        with socket.create_connection((address, 443), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname="egress.test"):
                counts["pinproxy"] += 1
    except ssl.SSLCertVerificationError as e:
        counts["someone-else"].append(repr(e))
    except OSError as e:   # refused, reset, closed, timed out: nobody served it
        kind = type(e).__name__
        counts["failed-closed"][kind] = counts["failed-closed"].get(kind, 0) + 1
    with open(out + ".tmp", "w") as f:
        json.dump(counts, f)
    os.replace(out + ".tmp", out)
    if os.path.exists(stop):
        break
    time.sleep(0.02)
"""

#: The users who try to take the port: an unprivileged one, and pinproxy's own uid (its
#: verify_command children run as that uid).
SQUATTERS = ("nobody", "pinproxy")
TRANSPARENT_PORT = 8
DROP_IN = "/etc/systemd/system/pinproxy.service.d/test-start-limit.conf"
TRANSPARENT_SOCKETS = ("pinproxy-transparent.socket", "pinproxy-transparent6.socket")


def as_user(user: str) -> list[str]:
    """setpriv as USER, with USER's group (nobody's is 65534: nogroup on Debian)."""
    ids = "65534" if user == "nobody" else user
    return ["setpriv", f"--reuid={ids}", f"--regid={ids}", "--clear-groups"]


def progress(box: Box, path: str) -> dict | None:
    p = box.run("cat", path)
    return json.loads(p.stdout) if p.returncode == 0 and p.stdout else None


def listeners_on_the_port(box: Box) -> str:
    return box.out("ss", "-Hltn", f"sport = :{TRANSPARENT_PORT}").strip()


def nobody_else_takes_the_port(box: Box, phase: str, action) -> None:
    """Squatters (SQUATTERS) try to bind the transparent port in a loop, and a client of user
    nobody keeps connecting to the lock's redirect, from before ACTION until two more rounds of
    each after it. No bind may succeed (privilege: EACCES, before any check of who holds the
    address), nothing may reach a squatter, and every redirected connection is pinproxy's or
    fails closed. ACTION returns whether it left the port closed (then those last attempts
    must have failed closed)."""
    directory = f"/tmp/squat-{phase}"
    stop = f"{directory}/stop"
    box.run("install", "-d", "-m", "0777", directory, check=True)
    outputs = {f"squatter {user}": f"{directory}/{user}.json" for user in SQUATTERS}
    for user in SQUATTERS:
        box.spawn(f"squat-{phase}-{user}", *as_user(user), "python3", "-c", SQUAT_LOOP, str(TRANSPARENT_PORT), stop,
                  outputs[f"squatter {user}"])
    outputs["client"] = f"{directory}/client.json"
    box.spawn(f"client-{phase}", *as_user("nobody"), "python3", "-c", REDIRECTED_CLIENT_LOOP, ORIGIN_SIDE,
              "/tmp/pinproxy-ca.pem", stop, outputs["client"])

    def done(what: str, path: str) -> int:
        current = progress(box, path)
        return (current or {}).get("rounds" if what != "client" else "attempts", 0)

    try:
        for what, path in outputs.items():
            wait_for(lambda: done(what, path) >= 1, 30, f"{phase}: the {what}'s first round")
        closed = action()
        marks = {what: done(what, path) for what, path in outputs.items()}
        for what, path in outputs.items():
            # A client attempt may wait out its 5 s connect timeout.
            wait_for(lambda: done(what, path) >= marks[what] + 2, 30, f"{phase}: two more rounds of the {what}")
    finally:
        box.run("touch", stop)
        for name in [f"squat-{phase}-{user}" for user in SQUATTERS] + [f"client-{phase}"]:
            wait_for(lambda: box.run("systemctl", "is-active", name).stdout.strip() not in ("active", "activating",
                                                                                              "deactivating"),
                     30, f"{name} to finish")
    for user in SQUATTERS:
        result = progress(box, outputs[f"squatter {user}"])
        print(f"{phase}: squatter {user}: {result['rounds']} rounds, {sorted({k.rsplit(': ', 1)[1] for k in result['said']})}, "
              f"{result['accepted']} accepted")
        assert result["accepted"] == 0, f"{phase}: a redirected connection reached user {user}: {result}"
        bound = {k: n for k, n in result["said"].items() if k.endswith(": bound")}
        assert bound == {}, f"{phase}: user {user} took the transparent port: {result}"
        assert all(k.endswith(": EACCES") for k in result["said"]), f"{phase}: not refused by privilege: {result}"
    client = progress(box, outputs["client"])
    print(f"{phase}: redirected client: {client}")
    assert client["someone-else"] == [], f"{phase}: someone else served a redirected connection: {client}"
    assert client["pinproxy"] + sum(client["failed-closed"].values()) == client["attempts"], client
    if closed:
        assert sum(client["failed-closed"].values()) >= 2, f"{phase}: the port was closed, yet: {client}"


def hit_the_start_limit(box: Box, work: Path) -> bool:
    """A config pinproxy rejects at every start, until systemd stops trying: the service's start
    limit, which also fails its socket units (systemd closes their sockets)."""
    box.write(DROP_IN, "[Unit]\nStartLimitIntervalSec=1h\nStartLimitBurst=2\n[Service]\nRestartSec=100ms\n")
    box.run("systemctl", "daemon-reload", check=True)
    box.write(CONFIG, config(work) + "\n[hosts.\"broken.test\"\npin = \n")
    box.run("systemctl", "restart", "--no-block", "pinproxy.service", check=True)
    wait_for(lambda: box.run("systemctl", "is-failed", "pinproxy.service").stdout.strip() == "failed", 60,
             "pinproxy.service to fail")
    # systemd 252 leaves the service's own Result at exit-code; its sockets say why they failed.
    for socket_unit in TRANSPARENT_SOCKETS:
        wait_for(lambda: box.unit(socket_unit, "ActiveState", "Result") == {"ActiveState": "failed",
                                                                             "Result": "service-start-limit-hit"},
                 30, f"{socket_unit} to fail with its service's start limit")
    assert listeners_on_the_port(box) == "", "the transparent port is still held: this phase tests nothing"
    return True


def stop_the_socket_units(box: Box, work: Path) -> bool:
    """The transparent socket units stopped, and the service with them: nothing holds the port."""
    box.run("systemctl", "stop", "pinproxy.service", *TRANSPARENT_SOCKETS, check=True)
    for unit in ("pinproxy.service", *TRANSPARENT_SOCKETS):
        wait_for(lambda: box.unit(unit, "ActiveState")["ActiveState"] == "inactive", 30, f"{unit} to be inactive")
    assert listeners_on_the_port(box) == "", "the transparent port is still held: this phase tests nothing"
    return True


def upgrade_the_package(box: Box, work: Path) -> bool:
    """apt installs the package over itself: the maintainer scripts run, the service restarts."""
    before = box.unit("pinproxy.service", "InvocationID")["InvocationID"]
    deb = next(work.glob("pinproxy_*.deb"))
    p = box.run("apt-get", "install", "-y", "--reinstall", str(deb), timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert box.wait_active("pinproxy.service")["InvocationID"] != before, "the upgrade did not restart the service"
    return False


def reload_the_config(box: Box, work: Path) -> bool:
    before = reloads_total(box)
    box.run("systemctl", "reload", "pinproxy", check=True)
    wait_for(lambda: reloads_total(box) > before, 30, "the reload to be counted")
    return False


def back_to_running(box: Box, work: Path) -> None:
    box.run("rm", "-f", DROP_IN, check=True)
    box.write(CONFIG, config(work))
    box.run("systemctl", "daemon-reload", check=True)
    box.run("systemctl", "reset-failed", "pinproxy.service", "pinproxy.socket", *TRANSPARENT_SOCKETS)
    box.run("systemctl", "start", "pinproxy.socket", *TRANSPARENT_SOCKETS, "pinproxy.service", check=True)
    box.wait_active("pinproxy.service")


def test_a_squatter_would_take_an_unprivileged_port(box):
    """The control: the same squatter binds a port that privilege does not guard (so the
    tests below can fail)."""
    box.run("install", "-d", "-m", "0777", "/tmp/squat-control", check=True)
    box.run("touch", "/tmp/squat-control/stop", check=True)   # one round
    box.run(*as_user("nobody"), "python3", "-c", SQUAT_LOOP, "3129", "/tmp/squat-control/stop",
            "/tmp/squat-control/nobody.json", check=True)
    said = progress(box, "/tmp/squat-control/nobody.json")["said"]
    assert any(k.endswith(": bound") for k in said), said


@pytest.mark.parametrize("phase", [hit_the_start_limit, stop_the_socket_units, upgrade_the_package, reload_the_config],
                         ids=["start-limit-hit", "socket-units-stopped", "package-upgrade", "reload"])
def test_nobody_else_takes_the_transparent_port_while_the_lock_is_on(box, work, phase):
    """#30 item 1 in the phases only systemd has: the lock stays on, the port stays privileged."""
    assert "table inet pinproxy" in box.out("nft", "list", "tables")
    name = phase.__name__.replace("_", "-")
    try:
        nobody_else_takes_the_port(box, name, lambda: phase(box, work))
        assert "table inet pinproxy" in box.out("nft", "list", "tables"), f"{name} lifted the lock"
    finally:
        back_to_running(box, work)
    pinned = box.run(*as_user("nobody"), "curl", "-sS", "--max-time", "20", "--cacert", "/tmp/pinproxy-ca.pem",
                     "https://egress.test/small")
    assert pinned.returncode == 0 and pinned.stdout.startswith("hello"), pinned


# --------------------------------------------------------------------------
# the package's life


def repack(deb: Path, directory: Path, version: str) -> Path:
    """DEB with its Version: replaced by VERSION (a newer build of the same contents)."""
    tree = directory / f"tree-{version}"
    subprocess.run(["dpkg-deb", "-R", str(deb), str(tree)], check=True)
    control = tree / "DEBIAN/control"
    control.write_text(re.sub(r"^Version: .*$", f"Version: {version}", control.read_text(), flags=re.M))
    out = directory / f"pinproxy_{version}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(tree), str(out)], check=True,
                   capture_output=True)
    shutil.rmtree(tree)
    os.chmod(out, 0o644)
    return out


def test_upgrade_keeps_config_edits_and_restarts_only_a_running_service(box, work, deb):
    edited = box.out("cat", CONFIG)
    assert edited.startswith("# pinproxy box test")
    before = box.unit("pinproxy.service", "InvocationID")["InvocationID"]
    # An older version's lock: one chain of today's rules missing from the live table.
    box.run("nft", "delete", "chain", "inet", "pinproxy", "capture_zone", check=True)
    stale = box.run("pinproxy", "egress", "status", "--config", CONFIG)
    assert stale.returncode == 4 and "not what" in stale.stdout, stale
    same = box.run("apt-get", "install", "-y", "--reinstall", str(work / deb.name), timeout=300)
    assert same.returncode == 0, same.stdout[-2000:] + same.stderr[-2000:]
    assert box.out("cat", CONFIG) == edited
    after = box.wait_active("pinproxy.service")["InvocationID"]
    assert after != before, "the running service was not restarted by the upgrade over itself"
    loaded = box.run("pinproxy", "egress", "status", "--config", CONFIG)
    assert "egress lock: on:" in loaded.stdout and "not what" not in loaded.stdout, f"the upgrade left the old rules: {loaded}"

    version = box.out("dpkg-query", "-W", "-f=${Version}", "pinproxy").strip()
    newer = repack(deb, work, version.rsplit("-", 1)[0] + "-1+boxtest1")
    box.run("systemctl", "stop", "pinproxy.service", check=True)
    up = box.run("apt-get", "install", "-y", str(newer), timeout=300)
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
    assert box.out("dpkg-query", "-W", "-f=${Version}", "pinproxy").endswith("+boxtest1")
    assert box.out("cat", CONFIG) == edited
    state = box.unit("pinproxy.service", "ActiveState")["ActiveState"]
    assert state == "inactive", f"a stopped service was started by the upgrade: {state}"
    box.run("systemctl", "start", "pinproxy", check=True)
    box.wait_active("pinproxy.service")


def test_remove_stops_the_service_and_lifts_the_lock_purge_deletes_the_ca(box):
    assert "table inet pinproxy" in box.out("nft", "list", "tables")
    assert box.run("test", "-e", "/var/lib/pinproxy/ca.key").returncode == 0
    p = box.run("apt-get", "remove", "-y", "pinproxy", timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    for unit in ("pinproxy.service", "pinproxy.socket", "pinproxy-egress.service"):
        assert box.run("systemctl", "is-active", unit).stdout.strip() != "active", unit
    assert "table inet pinproxy" not in box.out("nft", "list", "tables")
    assert box.run("test", "-e", CONFIG).returncode == 0      # remove keeps the conffile and the CA
    assert box.run("test", "-e", "/var/lib/pinproxy/ca.key").returncode == 0

    purge = box.run("apt-get", "purge", "-y", "pinproxy", timeout=300)
    assert purge.returncode == 0, purge.stdout[-2000:] + purge.stderr[-2000:]
    assert box.run("test", "-e", "/var/lib/pinproxy").returncode != 0
    assert box.run("test", "-e", CONFIG).returncode != 0
    assert "deleted the local CA" in purge.stdout + purge.stderr
    # The system user stays (Debian leaves system users behind: their files may remain elsewhere).
    assert box.run("id", "pinproxy").returncode == 0


# --------------------------------------------------------------------------
# scripts/install.sh's binary


def test_the_watchdog_replaces_install_sh_s_dynamic_binary(box, work, pinproxy):
    """The dynamically linked binary (the Swift runtime's own crash handler in it) is replaced in
    the same time as the package's static one."""
    ldd = subprocess.run(["ldd", str(pinproxy)], capture_output=True, text=True).stdout
    assert "libswiftCore" in ldd, f"{pinproxy} is not linked dynamically to the Swift runtime:\n{ldd}"
    p = box.run(str(REPO / "scripts/install.sh"), env={"PINPROXY_BINARY": str(pinproxy)}, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    box.run("install", "-m", "0644", str(work / "root.pem"), "/etc/pinproxy/root.pem", check=True)
    box.write(CONFIG, config(work))
    box.run("systemctl", "daemon-reload", check=True)
    box.run("systemctl", "enable", "--now", "pinproxy-transparent.socket", "pinproxy-transparent6.socket", check=True)
    box.run("systemctl", "enable", "--now", "pinproxy", check=True)
    box.wait_active("pinproxy.service")
    box.sh("install -m 0644 /var/lib/pinproxy/ca.pem /tmp/pinproxy-ca.pem")
    watchdog_replaces_frozen(box)
