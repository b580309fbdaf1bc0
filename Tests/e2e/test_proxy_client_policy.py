"""`[clients."SELECTOR"]`: policy by the local client's identity, with real users, real
programs, real sockets and a real cgroup.

Everything runs inside network namespaces of its own (`unshare --net`, lo up): the daemon, the
two HTTPS origins (api.test with www.api.test, and other.test, issued by int-a) and every
client. A second namespace joined by a veth pair (10.77.0.1 here, 10.77.0.2 there, nothing
else routed) holds a client whose address is not one of the daemon's host's: a "remote" one.
No packet can leave the two namespaces.

Users: `nobody` (65534) and a system user `pinproxy-test`, created here with `useradd --system`
when absent (`scripts/setup --tests` creates it too). Clients run as them through
`setpriv --reuid --regid --clear-groups`. A copy of curl at another path (with a space and a
quote in it) stands for "another program". A cgroup named like a system unit
(`/system.slice/pinproxy-e2e-*.service` under the cgroup v2 mount) holds a client for `unit:`.

Needs root (namespaces, setpriv, useradd, cgroups).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from capture_harness import capture  # noqa: F401 (fixture; it uses this module's public_dir)
from proxy_harness import PIN_X, PIN_Y, TIMEOUT, Proxy, clean_env, free_port, poll, proxy_factory
from service_support import Metrics

HERE = Path(__file__).resolve().parent
TEST_USER = "pinproxy-test"
NOBODY = 65534
OTHER_ADDRESS = "10.77.0.2"
DAEMON_ADDRESS = "10.77.0.1"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces, setpriv, useradd, cgroups")


# --------------------------------------------------------------------------
# namespaces, users, origins


class Namespace:
    """A network namespace held open by a sleeping process; commands enter it with nsenter."""

    def __init__(self):
        self.holder = subprocess.Popen(["unshare", "--net", "sh", "-c", "ip link set lo up || exit 96; exec sleep 3600"],
                                       stdin=subprocess.DEVNULL)
        poll(lambda: self.holder.poll() is None and os.readlink(f"/proc/{self.holder.pid}/ns/net") != os.readlink("/proc/self/ns/net")
             and self.run(["ip", "-o", "link", "show", "lo"]).stdout.find("UP") >= 0, what="a network namespace with lo up")

    @property
    def path(self) -> str:
        return f"/proc/{self.holder.pid}/ns/net"

    def argv(self, argv: list[str], user: int | str | None = None) -> list[str]:
        if user is not None:
            uid = user if isinstance(user, int) else pwd.getpwnam(user).pw_uid
            gid = pwd.getpwuid(uid).pw_gid
            argv = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *argv]
        return ["nsenter", f"--net={self.path}", *argv]

    def run(self, argv: list[str], user: int | str | None = None, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(argv, user), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, env=clean_env())

    def close(self) -> None:
        self.holder.kill()
        self.holder.wait(10)


class NamespacedProxy(Proxy):
    """A daemon inside `namespace`."""

    namespace: Namespace

    def argv(self) -> list[str]:
        return ["nsenter", f"--net={self.namespace.path}", *super().argv()]

    def wait_ready(self, timeout: float = TIMEOUT) -> None:
        probe = [sys.executable, "-c", f"import socket; socket.create_connection(('127.0.0.1', {self.port}), timeout=1).close()"]

        def ready():
            self.assert_alive("while starting")
            return self.namespace.run(probe).returncode == 0

        poll(ready, timeout, interval=0.1, what=f"pinproxy to accept in its namespace\n{self.describe()}")

    def metrics(self) -> Metrics:
        run = self.namespace.run(["curl", "-q", "-sS", f"http://127.0.0.1:{self.proxy_keys['metrics_listen'].split(':')[1]}/metrics"])
        assert run.returncode == 0, run.stderr
        return Metrics(run.stdout)


@pytest.fixture(scope="module")
def namespaces():
    here, there = Namespace(), Namespace()
    try:
        link = here.run(["ip", "link", "add", "ppa", "type", "veth", "peer", "name", "ppb", "netns", str(there.holder.pid)])
        if link.returncode != 0:
            pytest.skip(f"no veth pair here: {link.stderr.strip()}")
        for ns, device, address in ((here, "ppa", DAEMON_ADDRESS), (there, "ppb", OTHER_ADDRESS)):
            for argv in (["ip", "addr", "add", f"{address}/24", "dev", device], ["ip", "link", "set", device, "up"]):
                done = ns.run(argv)
                assert done.returncode == 0, f"{argv}: {done.stderr}"
        yield here, there
    finally:
        here.close()
        there.close()


@pytest.fixture(scope="module")
def test_user() -> pwd.struct_passwd:
    """The system user pinproxy-test, created when absent (and left: scripts/setup --tests makes it too)."""
    try:
        return pwd.getpwnam(TEST_USER)
    except KeyError:
        made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", TEST_USER],
                              capture_output=True, text=True)
        assert made.returncode == 0, f"useradd --system {TEST_USER}: {made.stderr}"
        return pwd.getpwnam(TEST_USER)


@pytest.fixture(scope="module")
def public_dir():
    """A directory every user can read: the pinproxy CA and the copy of curl go here."""
    d = Path(tempfile.mkdtemp(prefix="pinproxy-clients-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def curl_copy(public_dir) -> Path:
    """curl at another path: a space and a quote in it, so its log field needs escaping."""
    system_curl = shutil.which("curl")
    assert system_curl, "curl is not installed"
    d = public_dir / "bin"
    d.mkdir(mode=0o755)
    copy = d / 'curl "copy"'
    shutil.copy2(os.path.realpath(system_curl), copy)
    copy.chmod(0o755)
    return copy


class Origin:
    """tests/e2e/static_origin.py in the namespace, serving CHAIN on a port of its own."""

    def __init__(self, namespace: Namespace, pki, stem: str):
        self.proc = subprocess.Popen(namespace.argv([sys.executable, str(HERE / "static_origin.py"), "--chain",
                                                     str(pki.path(f"{stem}-chain.pem")), "--key", str(pki.path(f"{stem}.key")),
                                                     "--port", "0"]),
                                     stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=clean_env())
        line = self.proc.stdout.readline()
        assert "https://127.0.0.1:" in line, f"the {stem} origin did not start: {line!r}"
        self.port = int(line.rsplit(":", 1)[1].strip().rstrip("/"))

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def origins(namespaces, pki):
    here, _ = namespaces
    made = [Origin(here, pki, "api"), Origin(here, pki, "other")]
    yield {"api": made[0].port, "other": made[1].port}
    for o in made:
        o.close()


@pytest.fixture
def make_proxy(pinproxy, pki, tmp_path, namespaces, origins, public_dir):
    """make_proxy(clients_text, **proxy_keys) -> a daemon in the namespace with [clients] CLIENTS_TEXT."""
    here, _ = namespaces

    class Here(NamespacedProxy):
        namespace = here

    factory = proxy_factory(Here, pinproxy, pki, tmp_path)
    make = next(factory)

    def start(clients_text: str, **proxy_keys) -> NamespacedProxy:
        keys = {"allow_ports": [origins["api"], origins["other"]], "metrics_listen": f"127.0.0.1:{free_port()}",
                "client_identity_timeout": 10}
        keys.update(proxy_keys)
        p = make(start=False, proxy=keys, default={"trust": ["root-a.pem"]},
                 resolve={"api.test": "127.0.0.1", "www.api.test": "127.0.0.1", "other.test": "127.0.0.1"})
        p.proxy_keys["listen"] = [f"127.0.0.1:{p.port}", f"{DAEMON_ADDRESS}:{p.port}"]
        p.write_config(p.render() + "\n" + clients_text)
        p.start()
        ca = public_dir / f"ca-{p.port}.pem"
        ca.write_text(p.ca()[1])
        ca.chmod(0o644)
        p.public_ca = ca
        return p

    yield start
    try:
        next(factory)
    except StopIteration:
        pass


# --------------------------------------------------------------------------
# clients


def fetch(p: NamespacedProxy, host: str, origins: dict, *, user: int | str | None = None, curl: str | None = None,
          namespace: Namespace | None = None, proxy_address: str = "127.0.0.1", wrapper: tuple[str, ...] = ()) -> int:
    """GET https://HOST:PORT/ through the daemon with curl (as USER, in NAMESPACE, started by
    WRAPPER): the CONNECT answer's status (200 when the tunnel opened and the origin answered)."""
    port = origins["api" if host.endswith("api.test") else "other"]
    argv = [*wrapper, curl or "curl", "-q", "-sS", "-o", "/dev/null", "-w", "%{http_code} %{http_connect}", "--max-time", "20",
            "-x", f"http://{proxy_address}:{p.port}", "--cacert", str(p.public_ca), f"https://{host}:{port}/"]
    done = (namespace or p.namespace).run(argv, user=user, timeout=40)
    codes = done.stdout.split()
    assert len(codes) == 2, f"{argv}: {done.stdout!r} {done.stderr!r}"
    http_code, connect_code = int(codes[0]), int(codes[1])
    if connect_code == 200:
        assert http_code == 200, f"{host}: tunnel open but the origin answered {http_code}: {done.stderr}"
    return connect_code or http_code


def decision(p: NamespacedProxy, since: int, host: str, **fields: str):
    """The connection line for HOST after mark SINCE with FIELDS."""
    return p.wait_for_log(lambda l: l.get("event") == "connection" and l.get("host") == host
                          and all(l.get(k) == v for k, v in fields.items()), since=since,
                          what=f"event=connection host={host} {fields}")


def assert_refused(p, since, host, *, uid: int, user: str, section: str):
    line = decision(p, since, host, outcome="refused")
    assert line.get("reason") == "client-denied" and line.get("status") == "403", line.raw
    assert line.get("client_uid") == str(uid) and line.get("client_user") == user, line.raw
    assert section in line.get("detail", ""), line.raw
    return line


# --------------------------------------------------------------------------
# tests


def user_rules(selector: str) -> str:
    return f'[clients."{selector}"]\nallow = ["api.test"]\n'


@pytest.mark.parametrize("by", ["user", "uid"])
def test_two_users_one_limited_by_its_section(make_proxy, origins, test_user, by):
    """user:NAME and uid:N naming the same user behave the same."""
    selector = f"user:{TEST_USER}" if by == "user" else f"uid:{test_user.pw_uid}"
    p = make_proxy(user_rules(selector))
    mark = p.mark()
    assert fetch(p, "api.test", origins, user=TEST_USER) == 200
    assert fetch(p, "other.test", origins, user=TEST_USER) == 403
    assert_refused(p, mark, "other.test", uid=test_user.pw_uid, user=TEST_USER, section=f'clients."{selector}" does not allow other.test')
    allowed = decision(p, mark, "api.test", outcome="allowed")
    assert allowed.get("client_uid") == str(test_user.pw_uid), allowed.raw
    # nobody has no section: it reaches both.
    assert fetch(p, "api.test", origins, user=NOBODY) == 200
    assert fetch(p, "other.test", origins, user=NOBODY) == 200
    line = decision(p, mark, "other.test", outcome="allowed")
    assert line.get("client_uid") == str(NOBODY) and line.get("client_user") == "nobody", line.raw
    closed = p.wait_for_log(lambda l: l.get("event") == "tunnel-closed" and l.get("host") == "other.test", since=mark,
                            what="the tunnel-closed line of nobody's tunnel")
    assert closed.get("client_uid") == str(NOBODY) and closed.get("client_user") == "nobody", closed.raw
    m = p.metrics()
    assert m.value("pinproxy_connections_total", outcome="refused", reason="client-denied", client=selector) == 1, m
    assert m.value("pinproxy_connections_total", outcome="allowed", reason="none", client=selector) == 1, m
    assert m.value("pinproxy_connections_total", outcome="allowed", reason="none", client="none") == 2, m
    assert m.value("pinproxy_refusals_total", host_pattern="[default]", reason="client-denied", mode="enforce", client=selector) == 1, m
    assert m.value("pinproxy_client_lookups_total", result="found") == 4, m


def test_a_program_copy_is_limited_and_the_system_curl_is_not(make_proxy, origins, test_user, curl_copy):
    exe = str(curl_copy)
    p = make_proxy(f'[clients.{json.dumps("exe:" + exe)}]\nallow = ["api.test", "www.api.test"]\n\n'
                   f'[clients."user:{TEST_USER}"]\nallow = ["api.test", "other.test"]\n')
    mark = p.mark()
    # nobody: the copy is limited by its exe section, the system curl is not.
    assert fetch(p, "other.test", origins, user=NOBODY, curl=exe) == 403
    line = decision(p, mark, "other.test", outcome="refused")
    assert line.get("client_exe") == exe and line.get("client_uid") == str(NOBODY), line.raw
    assert f'clients.{json.dumps("exe:" + exe)} does not allow other.test' in line.get("detail", ""), line.raw
    assert fetch(p, "www.api.test", origins, user=NOBODY, curl=exe) == 200
    assert fetch(p, "other.test", origins, user=NOBODY) == 200
    system = decision(p, mark, "other.test", outcome="allowed")
    assert system.get("client_exe") == os.path.realpath(shutil.which("curl")), system.raw
    # pinproxy-test running the copy: both its user section and the exe section apply.
    mark = p.mark()
    assert fetch(p, "api.test", origins, user=TEST_USER, curl=exe) == 200
    assert fetch(p, "other.test", origins, user=TEST_USER, curl=exe) == 403
    assert_refused(p, mark, "other.test", uid=test_user.pw_uid, user=TEST_USER, section="does not allow other.test")
    assert fetch(p, "www.api.test", origins, user=TEST_USER, curl=exe) == 403
    assert_refused(p, mark, "www.api.test", uid=test_user.pw_uid, user=TEST_USER,
                   section=f'clients."user:{TEST_USER}" does not allow www.api.test')
    both = f"exe:{exe},user:{TEST_USER}"
    m = p.metrics()
    assert m.value("pinproxy_connections_total", outcome="refused", reason="client-denied", client=both) == 2, m
    assert m.value("pinproxy_connections_total", outcome="allowed", reason="none", client=both) == 1, m
    assert m.value("pinproxy_connections_total", outcome="allowed", reason="none", client=f"exe:{exe}") == 1, m


def test_deny_wins_and_report_only_sections(make_proxy, origins, test_user):
    p = make_proxy(f'[clients."user:{TEST_USER}"]\nallow = ["api.test", "other.test"]\ndeny = ["other.test"]\n\n'
                   f'[clients."uid:{NOBODY}"]\nallow = ["api.test"]\nenforce = false\n')
    mark = p.mark()
    assert fetch(p, "other.test", origins, user=TEST_USER) == 403
    assert_refused(p, mark, "other.test", uid=test_user.pw_uid, user=TEST_USER, section=f'clients."user:{TEST_USER}" denies other.test')
    # enforce = false: allowed, logged and answered as would-refuse.
    assert fetch(p, "other.test", origins, user=NOBODY) == 200
    line = decision(p, mark, "other.test", outcome="report-only")
    assert line.get("reason") == "client-denied" and line.get("client_uid") == str(NOBODY), line.raw
    m = p.metrics()
    assert m.value("pinproxy_connections_total", outcome="would_refuse", reason="client-denied", client=f"uid:{NOBODY}") == 1, m
    assert m.value("pinproxy_refusals_total", host_pattern="[default]", reason="client-denied", mode="report_only",
                   client=f"uid:{NOBODY}") == 1, m


CONNECT_AND_EXIT = r"""
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"CONNECT api.test:%s HTTP/1.1\r\nHost: api.test\r\n\r\n" % sys.argv[2].encode())
print(s.getsockname()[1], flush=True)
"""


def test_unknown_clients_and_a_client_that_left_before_its_lookup(make_proxy, origins):
    """The daemon is stopped while the client connects, asks and exits: once it runs again, the
    client's socket is an orphan, the client is unknown, and unknown clients are refused."""
    p = make_proxy(f'[clients."uid:{NOBODY}"]\nallow = ["api.test"]\n')
    mark = p.mark()
    os.kill(p.pid, signal.SIGSTOP)
    try:
        done = p.namespace.run([sys.executable, "-c", CONNECT_AND_EXIT, str(p.port), str(origins["api"])])
    finally:
        os.kill(p.pid, signal.SIGCONT)
    assert done.returncode == 0, done.stderr
    client_port = done.stdout.strip()
    line = p.wait_for_log(lambda l: l.get("event") == "connection" and l.get("client") == f"127.0.0.1:{client_port}", since=mark,
                          what="the decision on the client that left")
    assert line.get("outcome") == "refused" and line.get("reason") == "client-denied", line.raw
    assert "unknown (" in line.get("detail", "") and "client_uid" not in line, line.raw
    p.assert_alive("after a client left before its lookup")
    assert p.metrics().value("pinproxy_client_lookups_total", result="unknown") == 1
    # The daemon goes on identifying others.
    assert fetch(p, "api.test", origins, user=NOBODY) == 200


def test_unknown_clients_admitted_by_their_own_section(make_proxy, origins):
    p = make_proxy(f'[clients."uid:{NOBODY}"]\nallow = []\n\n[clients."unknown"]\nallow = ["api.test"]\n')
    mark = p.mark()
    os.kill(p.pid, signal.SIGSTOP)
    try:
        done = p.namespace.run([sys.executable, "-c", CONNECT_AND_EXIT, str(p.port), str(origins["api"])])
    finally:
        os.kill(p.pid, signal.SIGCONT)
    client = f"127.0.0.1:{done.stdout.strip()}"
    line = p.wait_for_log(lambda l: l.get("event") == "connection" and l.get("client") == client, since=mark,
                          what="the decision on the client that left")
    # Admitted by [clients."unknown"]: what ends it is the client having gone, not a refusal.
    assert line.get("outcome") in ("client-gone", "allowed") and line.get("reason") != "client-denied", line.raw


def test_a_remote_peer_is_remote_and_not_looked_up(make_proxy, origins, namespaces):
    _, there = namespaces
    p = make_proxy(f'[clients."uid:{NOBODY}"]\nallow = []\n\n[clients."remote"]\nallow = ["api.test"]\n')
    mark = p.mark()
    assert fetch(p, "api.test", origins, namespace=there, proxy_address=DAEMON_ADDRESS) == 200
    assert fetch(p, "other.test", origins, namespace=there, proxy_address=DAEMON_ADDRESS) == 403
    line = decision(p, mark, "other.test", outcome="refused")
    assert line.get("client", "").startswith(OTHER_ADDRESS + ":"), line.raw
    assert line.get("reason") == "client-denied" and "client remote: clients.remote does not allow other.test" in line.get("detail", ""), line.raw
    assert "client_uid" not in line, line.raw
    m = p.metrics()
    assert m.value("pinproxy_client_lookups_total", result="found") == 0, m
    assert m.value("pinproxy_client_lookups_total", result="unknown") == 0, m
    assert m.value("pinproxy_connections_total", outcome="allowed", reason="none", client="remote") == 1, m
    # Without a [clients."remote"] section, remote clients get the host table.
    p2 = make_proxy(f'[clients."uid:{NOBODY}"]\nallow = []\n')
    assert fetch(p2, "other.test", origins, namespace=there, proxy_address=DAEMON_ADDRESS) == 200


def cgroup2_root() -> Path | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        head, _, tail = line.partition(" - ")
        if tail.startswith("cgroup2 "):
            return Path(head.split()[4])
    return None


def test_a_client_in_a_system_unit_cgroup(make_proxy, origins):
    root = cgroup2_root()
    if root is None or not os.access(root, os.W_OK):
        pytest.skip("no writable cgroup v2 hierarchy: the cgroup-to-unit mapping is unit-tested (ClientRulesTests)")
    unit = f"pinproxy-e2e-{uuid.uuid4().hex[:8]}.service"
    system_slice = root / "system.slice"
    made_slice = not system_slice.exists()
    if made_slice:
        system_slice.mkdir()
    cgroup = system_slice / unit
    cgroup.mkdir()
    try:
        p = make_proxy(f'[clients."unit:{unit}"]\nallow = ["api.test"]\n')
        mark = p.mark()
        in_unit = ("sh", "-c", f'echo $$ > "{cgroup}/cgroup.procs" && exec "$@"', "sh")
        assert fetch(p, "api.test", origins, wrapper=in_unit) == 200
        assert fetch(p, "other.test", origins, wrapper=in_unit) == 403
        line = decision(p, mark, "other.test", outcome="refused")
        assert line.get("client_unit") == unit and line.get("reason") == "client-denied", line.raw
        assert f'clients."unit:{unit}" does not allow other.test' in line.get("detail", ""), line.raw
        assert decision(p, mark, "api.test", outcome="allowed").get("client_unit") == unit
        # The same user outside the unit's cgroup is not the unit.
        assert fetch(p, "other.test", origins) == 200
        assert "client_unit" not in decision(p, mark, "other.test", outcome="allowed")
    finally:
        poll(lambda: not (cgroup / "cgroup.procs").read_text().strip(), what="the unit's cgroup to empty")
        cgroup.rmdir()
        if made_slice:
            system_slice.rmdir()


def test_evaluate_client(pinproxy, pki, tmp_path, test_user):
    config = tmp_path / "pinproxy.toml"
    for name in ("root-a.pem",):
        os.link(pki.path(name), tmp_path / name)
    config.write_text(f'[default]\ntrust = ["root-a.pem"]\n\n[clients."user:{TEST_USER}"]\nallow = ["api.test"]\n\n'
                      f'[clients."exe:/usr/bin/git"]\nallow = ["git.test"]\nenforce = false\n')

    def evaluate(host: str, *clients: str) -> tuple[int, str]:
        chain = pki.path("other-chain.pem" if host == "other.test" else "api-chain.pem")
        argv = [str(pinproxy), "evaluate", "--config", str(config), "--host", host, "--chain", str(chain),
                "--at", "2026-06-01T00:00:00Z"]
        for c in clients:
            argv += ["--client", c]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, env=clean_env())
        return done.returncode, done.stdout + done.stderr

    assert evaluate("other.test", f"user:{TEST_USER}")[0] == 1
    assert evaluate("other.test", f"uid:{test_user.pw_uid}")[0] == 1
    status, out = evaluate("other.test", f"uid:{test_user.pw_uid}")
    assert out.splitlines()[0] == "refuse: client-denied", out
    assert f'clients."user:{TEST_USER}" does not allow other.test' in out and f"[clients] sections: user:{TEST_USER}" in out, out
    assert evaluate("api.test", f"user:{TEST_USER}")[0] == 0
    status, out = evaluate("other.test", f"uid:{NOBODY}")
    assert (status, out.splitlines()[0]) == (0, "allow"), out
    status, out = evaluate("other.test", f"uid:{NOBODY}", "exe:/usr/bin/git")
    assert (status, out.splitlines()[0]) == (0, "allow (would refuse: client-denied)"), out
    status, out = evaluate("other.test", "unknown")
    assert (status, out.splitlines()[0]) == (1, "refuse: client-denied"), out
    assert evaluate("other.test", "remote")[1].splitlines()[0] == "allow"
    status, out = evaluate("other.test")
    assert status == 0 and "give --client" in out, out
    status, out = evaluate("other.test", "exe:/usr/bin/git")
    assert status == 2 and "add --client uid:N or --client user:NAME" in out, out
    status, out = evaluate("other.test", "unknown", f"uid:{NOBODY}")
    assert status == 2, out


HOLD_A_TUNNEL = r"""
import socket, ssl, sys
proxy_port, host, port, ca = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
s = socket.create_connection(("127.0.0.1", proxy_port), timeout=20)
s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(1)
assert head.startswith(b"HTTP/1.1 200"), head
tls = ssl.create_default_context(cafile=ca).wrap_socket(s, server_hostname=host)
print("open", flush=True)
sys.stdin.readline()
tls.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
answer = b""
while chunk := tls.recv(65536):
    answer += chunk
print(answer.split(b"\r\n")[0].decode(), flush=True)
"""


def test_a_reload_applies_to_new_connections_only(make_proxy, origins):
    p = make_proxy('[clients."unit:none-such.service"]\n\n[clients."unknown"]\n')
    held = subprocess.Popen(p.namespace.argv([sys.executable, "-c", HOLD_A_TUNNEL, str(p.port), "other.test",
                                              str(origins["other"]), str(p.public_ca)], user=NOBODY),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=clean_env())
    try:
        assert held.stdout.readline().strip() == "open"
        p.write_config(p.config_text + f'\n[clients."uid:{NOBODY}"]\nallow = []\n')
        assert p.reload().get("outcome") == "ok"
        assert fetch(p, "other.test", origins, user=NOBODY) == 403
        held.stdin.write("go\n")
        held.stdin.flush()
        assert held.stdout.readline().startswith("HTTP/1.0 200"), "the tunnel opened before the reload was cut"
    finally:
        held.kill()
        held.wait(10)


def test_reports_carry_the_client_only_when_asked(make_proxy, origins):
    for asked in (False, True):
        p = make_proxy(f'[hosts."other.test"]\ntrust = ["root-a.pem"]\npin = "public-key"\npins = ["{PIN_X}", "{PIN_Y}"]\n\n'
                       f'[clients."uid:{NOBODY}"]\n', report_to=["file:reports.jsonl"], report_client_identity=asked)
        assert fetch(p, "other.test", origins, user=NOBODY) == 403
        reports = p.dir / "reports.jsonl"
        report = json.loads(poll(lambda: reports.exists() and reports.read_text().strip(), what="a pin-failure report"))
        assert report["pinproxy-reason"] == "pin-mismatch", report
        if asked:
            assert report["pinproxy-client"]["uid"] == NOBODY and report["pinproxy-client"]["user"] == "nobody", report
        else:
            assert "pinproxy-client" not in report, report


def test_verify_command_is_told_the_client_and_caches_per_client(make_proxy, origins, test_user, public_dir):
    calls = public_dir / "verify-calls"
    calls.write_text("")
    calls.chmod(0o666)
    script = public_dir / "verify.sh"
    script.write_text(f'#!/bin/sh\necho "$PINPROXY_CLIENT $PINPROXY_CLIENT_UID $PINPROXY_CLIENT_USER" >> {calls}\ncat >/dev/null\n')
    script.chmod(0o755)
    p = make_proxy(f'[hosts."other.test"]\ntrust = ["root-a.pem"]\nverify_command = ["{script}"]\n\n[clients."unknown"]\n',
                   verify_command_cache=300)
    for user in (NOBODY, NOBODY, TEST_USER):
        assert fetch(p, "other.test", origins, user=user) == 200
    assert calls.read_text().splitlines() == [f"local {NOBODY} nobody", f"local {test_user.pw_uid} {TEST_USER}"]


def test_check_and_start_refuse_exe_sections_that_cannot_match_here(pinproxy, public_dir):
    """Without CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH (the shipped unit grants neither), which
    program holds another user's socket cannot be read: exe: sections are an error, not a rule
    that silently never matches. As root with them, the same config is fine."""
    config = public_dir / "exe-rules.toml"
    config.write_text('[proxy]\nlisten = ["127.0.0.1:1"]\n\n[clients."uid:0"]\n\n[clients."exe:/usr/bin/git"]\nallow = ["git.test"]\n')
    config.chmod(0o644)
    check = [str(pinproxy), "check", "--config", str(config)]
    as_root = subprocess.run(check, capture_output=True, text=True, timeout=TIMEOUT, env=clean_env())
    assert as_root.returncode == 0 and "clients: 2 section(s): uid:0, exe:/usr/bin/git" in as_root.stdout, as_root.stdout + as_root.stderr
    for confined in (["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"],
                     ["setpriv", "--bounding-set=-sys_ptrace,-dac_read_search"]):
        done = subprocess.run([*confined, *check], capture_output=True, text=True, timeout=TIMEOUT, env=clean_env())
        assert done.returncode == 1, f"{confined}: {done.stdout}{done.stderr}"
        assert f'{config}:6: clients."exe:/usr/bin/git": exe: sections cannot identify other users\' programs here' in done.stderr, done.stderr
    run = subprocess.run(["setpriv", "--bounding-set=-sys_ptrace", str(pinproxy), "run", "--config", str(config)],
                         capture_output=True, text=True, timeout=TIMEOUT, env=clean_env())
    assert run.returncode == 1 and "event=start-failed" in run.stderr and "CAP_SYS_PTRACE" in run.stderr, run.stderr


@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
def test_the_transparent_listener_looks_clients_up_by_their_original_destination(capture, pki, family):
    """Behind the egress lock the client's socket goes to the origin's address, not to the
    listener: it is found by that 4-tuple (nobody reaches api.test, and is refused
    www.api.test by its section, inside TLS); without the original destination it would be
    unknown, and refused both."""
    address = "127.0.0.1" if family == "ipv4" else "::1"
    literal = address if family == "ipv4" else f"[{address}]"
    capture.origin("api", address=address)
    proxy = capture.proxy(start=False, hosts={"api.test": {"trust": ["root-a.pem"]}, "www.api.test": {"trust": ["root-a.pem"]}},
                          proxy={"metrics_listen": f"127.0.0.1:{free_port()}"})
    proxy.write_config(proxy.render() + f'\n[clients."uid:{NOBODY}"]\nallow = ["api.test"]\n')
    proxy.start()
    proxy.lock()
    ca = capture.ca(proxy)
    allowed = capture.curl("https://api.test/small", ca, f"api.test:443:{literal}")
    assert allowed.exit == 0 and allowed.status == 200, f"{allowed}"
    refused = capture.curl("https://www.api.test/small", ca, f"www.api.test:443:{literal}")
    assert refused.status == 403 and "pinproxy refused www.api.test:443: client-denied" in refused.body, f"{refused}"
    line = proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("host") == "www.api.test")
    assert line.get("listener") == "transparent" and line.get("reason") == "client-denied", line.raw
    assert line.get("client_uid") == str(NOBODY) and line.get("client_user") == "nobody", line.raw
    assert proxy.metrics().value("pinproxy_client_lookups_total", result="found") == 2
