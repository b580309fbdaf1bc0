"""`pinproxy run` under a service manager: the real daemon, loopback only.

1. notify protocol (sd_notify without systemd): a real AF_UNIX datagram socket in
   NOTIFY_SOCKET (filesystem path and abstract `@name`): READY=1 + STATUS= once the
   listeners serve; SIGHUP -> RELOADING=1 + MONOTONIC_USEC (CLOCK_MONOTONIC, µs) then READY=1,
   also for a broken config (the old policy keeps serving); SIGTERM -> STOPPING=1, exit 0;
   WATCHDOG_USEC -> WATCHDOG=1 pings (unless WATCHDOG_PID names another process); periodic
   STATUS=; no NOTIFY_SOCKET (or nobody listening) changes nothing.
2. socket activation: a listening socket passed as fd 3 with LISTEN_FDS=1 and LISTEN_PID=
   the daemon's pid is where it accepts, and proxy.listen is not bound; a LISTEN_PID of
   another process is ignored; an fd 3 that is not a listening socket stops the start.
3. journald: with JOURNAL_STREAM naming stderr, each line starts with its syslog
   priority (<6> allowed/lifecycle, <4> refused and report-only, <3> errors); without it,
   or when it names another file, lines are plain.
4. metrics: /metrics (Prometheus text, parsed by prometheus_client) and /healthz.
5. scripts/install.sh staged into DESTDIR.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import origin as originlib
from pki import load_certs
from proxy_harness import (
    API,
    PIN_X,
    PIN_Y,
    REPO,
    TIMEOUT,
    Tunnel,
    clean_env,
    connect,
    curl,  # noqa: F401 (fixture)
    expect_refusal,
    free_port,
    load_cert,
    origins,  # noqa: F401 (fixture)
    pinned_entry,
    poll,
    port_accepts,
    raw_exchange,
    run_curl,
)
from service_support import (
    NotifyListener,
    event_lines,
    http_get,
    journal_stream_of,
    make_service_proxy,  # noqa: F401 (fixture)
    prometheus_parser,
    scrape,
)

WWW = "www.api.test"


def monotonic_usec() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


@pytest.fixture
def notify_path():
    n = NotifyListener(abstract=False)
    yield n
    n.close()


@pytest.fixture(params=["path", "abstract"])
def notify(request):
    n = NotifyListener(abstract=request.param == "abstract")
    yield n
    n.close()


def standard_hosts(pki):
    """api.test allowed (pinned right), www.api.test refused (pin-mismatch)."""
    return {
        API: pinned_entry(pki, "api", "int-a"),
        WWW: {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X, PIN_Y]},
    }


def service_proxy(make_service_proxy, origins, pki, hosts=None, proxy=None, **kw):
    keys = {"allow_ports": [origins.api.port, origins.ip.port]}
    keys.update(proxy or {})
    return make_service_proxy(proxy=keys, resolve={API: "127.0.0.1", WWW: "127.0.0.1"},
                              hosts=hosts if hosts is not None else standard_hosts(pki), **kw)


def assert_allowed(proxy, origins, host=API):
    with Tunnel(proxy, host, origins.api.port) as t:
        assert t.get("/small") == (200, originlib.SMALL_BODY)
        cport = t.client_port
    line = proxy.connection_log(cport)
    assert line.get("outcome") == "allowed", line.raw
    return line


def broken_config(proxy, deny_api: bool = True) -> str:
    """The current config with api.test switched to deny AND a TOML syntax error: if any of it
    were applied, api.test would be refused."""
    text = proxy.render()
    if deny_api:
        text = text.replace(f'[hosts."{API}"]\n', f'[hosts."{API}"]\naction = "deny"\n', 1)
        assert 'action = "deny"' in text
    return text + '\n[hosts."broken.test"]\npin = "public-key\n'


# ==========================================================================
# 1. notify protocol


def test_notify_lifecycle_exact_sequence(make_service_proxy, origins, pki, notify):
    """READY (after listening) -> RELOADING+MONOTONIC_USEC -> READY -> STOPPING, exit 0."""
    p = service_proxy(make_service_proxy, origins, pki, env={"NOTIFY_SOCKET": notify.address}, start=False)
    p.start(wait=False)

    ready = notify.next(what="READY=1 at startup", proxy=p)
    # At the moment READY=1 arrives the daemon must already serve.
    listening = [l for l in p.logs() if l.get("event") == "listening"]
    assert listening, f"READY=1 arrived before any `listening` line\n{p.describe()}"
    assert port_accepts(p.port), f"READY=1 arrived but 127.0.0.1:{p.port} does not accept\n{p.describe()}"
    assert ready.keys == ["READY", "STATUS"], ready
    assert ready.get("READY") == "1", ready
    assert "2 host entries" in ready.get("STATUS"), ready
    assert "\n" not in ready.get("STATUS")

    assert_allowed(p, origins)

    before = monotonic_usec()
    mark = p.mark()
    p.send_signal(signal.SIGHUP)
    reloading = notify.next(what="RELOADING=1 after SIGHUP", proxy=p)
    after = monotonic_usec()
    assert reloading.keys[:2] == ["RELOADING", "MONOTONIC_USEC"], reloading
    assert reloading.get("RELOADING") == "1", reloading
    usec = reloading.get("MONOTONIC_USEC")
    assert usec and usec.isdigit(), reloading
    assert before <= int(usec) <= after, (
        f"MONOTONIC_USEC={usec} is not CLOCK_MONOTONIC µs between SIGHUP ({before}) and receipt ({after})")

    ready2 = notify.next(what="READY=1 after the reload", proxy=p)
    assert ready2.keys == ["READY", "STATUS"], ready2
    assert ready2.get("READY") == "1"
    assert ready2.get("STATUS").startswith("reloaded"), ready2
    # READY=1 comes after the reload finished: its log line is already written.
    reload_lines = [l for l in p.logs(mark) if l.get("event") == "reload"]
    assert reload_lines and reload_lines[0].get("outcome") == "ok", f"READY=1 before the reload's log line\n{p.describe()}"
    assert_allowed(p, origins)

    p.send_signal(signal.SIGTERM)
    stopping = notify.next(what="STOPPING=1 after SIGTERM", proxy=p)
    assert stopping.keys[0] == "STOPPING" and stopping.get("STOPPING") == "1", stopping
    assert p.exit_code_after() == 0, p.describe()

    notify.drain()
    meaningful = [d.keys[0] for d in notify.received if not d.status_only]
    assert meaningful == ["READY", "RELOADING", "READY", "STOPPING"], notify.received
    assert not any(d.watchdog for d in notify.received), "WATCHDOG=1 without WATCHDOG_USEC"


def test_notify_reload_broken_config_still_ready_and_old_policy_serves(make_service_proxy, origins, pki, notify_path):
    notify = notify_path
    p = service_proxy(make_service_proxy, origins, pki, env={"NOTIFY_SOCKET": notify.address}, start=False)
    p.start(wait=False)
    assert notify.next(what="READY=1", proxy=p).get("READY") == "1"
    assert_allowed(p, origins)

    p.write_config(broken_config(p))
    before = monotonic_usec()
    line = p.reload()
    assert line.get("outcome") == "failed", line.raw
    reloading = notify.next(what="RELOADING=1", proxy=p)
    assert reloading.keys[:2] == ["RELOADING", "MONOTONIC_USEC"], reloading
    assert before <= int(reloading.get("MONOTONIC_USEC")) <= monotonic_usec()
    ready = notify.next(what="READY=1 after the failed reload", proxy=p)
    assert ready.keys == ["READY", "STATUS"] and ready.get("READY") == "1", ready

    # The old policy (api.test allowed) still serves; the broken file's deny is not in force.
    assert_allowed(p, origins)
    expect_refusal(p, WWW, origins.api.port, "pin-mismatch")
    assert p.stop() == 0
    notify.drain()
    assert [d.keys[0] for d in notify.received if not d.status_only] == ["READY", "RELOADING", "READY", "STOPPING"], \
        notify.received


def test_notify_two_reloads_each_get_their_own_pair(make_service_proxy, origins, pki, notify_path):
    notify = notify_path
    p = service_proxy(make_service_proxy, origins, pki, env={"NOTIFY_SOCKET": notify.address}, start=False)
    p.start(wait=False)
    notify.next(what="READY=1", proxy=p)
    stamps = []
    for _ in range(2):
        p.reload()
        r = notify.next(what="RELOADING=1", proxy=p)
        assert r.get("RELOADING") == "1", r
        stamps.append(int(r.get("MONOTONIC_USEC")))
        assert notify.next(what="READY=1", proxy=p).get("READY") == "1"
    assert stamps[0] < stamps[1], stamps


def test_watchdog_pings(make_service_proxy, origins, pki, notify_path):
    notify = notify_path
    p = service_proxy(make_service_proxy, origins, pki,
                      env={"NOTIFY_SOCKET": notify.address, "WATCHDOG_USEC": "200000"}, start=False)
    p.start(wait=False)
    notify.next(what="READY=1", proxy=p)
    pings = notify.collect(2.0, lambda d: d.watchdog, want=2)
    assert len(pings) >= 2, f"expected >= 2 WATCHDOG=1 within 2 s (WATCHDOG_USEC=200000); got {notify.received}"
    assert all(d.raw == "WATCHDOG=1" for d in pings), pings
    p.assert_alive()


def test_watchdog_pid_of_the_daemon_pings(make_service_proxy, origins, pki, notify_path):
    notify = notify_path
    p = service_proxy(make_service_proxy, origins, pki,
                      env={"NOTIFY_SOCKET": notify.address, "WATCHDOG_USEC": "200000"},
                      pid_vars=["WATCHDOG_PID"], start=False)
    p.start(wait=False)
    notify.next(what="READY=1", proxy=p)
    pings = notify.collect(2.0, lambda d: d.watchdog, want=2)
    assert len(pings) >= 2, f"WATCHDOG_PID = the daemon's pid: expected pings, got {notify.received}"


def test_watchdog_pid_of_another_process_no_pings(make_service_proxy, origins, pki, notify_path):
    notify = notify_path
    p = service_proxy(make_service_proxy, origins, pki,
                      env={"NOTIFY_SOCKET": notify.address, "WATCHDOG_USEC": "200000", "WATCHDOG_PID": "1"},
                      start=False)
    p.start(wait=False)
    notify.next(what="READY=1", proxy=p)
    pings = notify.collect(1.0, lambda d: d.watchdog)  # 10 intervals
    assert pings == [], f"WATCHDOG_PID=1 is not the daemon, yet it pinged: {notify.received}"


def test_periodic_status_updates(make_service_proxy, origins, pki, notify_path):
    notify = notify_path
    p = service_proxy(make_service_proxy, origins, pki, env={"NOTIFY_SOCKET": notify.address}, start=False)
    p.start(wait=False)
    notify.next(what="READY=1", proxy=p)
    status = notify.next(timeout=15, what="a STATUS= update", skip=lambda d: not d.status_only, proxy=p)
    assert re.fullmatch(r"2 host entries, 0 open tunnels, \d+ connections", status.get("STATUS")), status


def test_no_notify_socket_nothing_breaks(make_service_proxy, origins, pki):
    p = service_proxy(make_service_proxy, origins, pki, env={"WATCHDOG_USEC": "200000"})
    assert_allowed(p, origins)
    assert p.reload().get("outcome") == "ok"
    assert_allowed(p, origins)
    assert p.stop() == 0, p.describe()


@pytest.mark.parametrize("address", ["missing-path", "abstract-nobody", "relative", "at-only"])
def test_notify_socket_unusable_nothing_breaks(make_service_proxy, origins, pki, tmp_path, address):
    value = {"missing-path": str(tmp_path / "nobody-here"), "abstract-nobody": f"@pinproxy-e2e-nobody-{os.getpid()}",
             "relative": "notify.sock", "at-only": "@"}[address]
    p = service_proxy(make_service_proxy, origins, pki, env={"NOTIFY_SOCKET": value, "WATCHDOG_USEC": "200000"})
    assert_allowed(p, origins)
    assert p.reload().get("outcome") == "ok"
    assert_allowed(p, origins)
    assert p.stop() == 0, p.describe()


def test_sighup_while_draining_does_not_announce_ready(make_service_proxy, origins, pki, notify_path):
    """After STOPPING=1 the daemon is going away: a SIGHUP then must not send READY=1 (which would
    tell the service manager the service is up again)."""
    notify = notify_path
    p = service_proxy(make_service_proxy, origins, pki, proxy={"drain_timeout": 10},
                      env={"NOTIFY_SOCKET": notify.address}, start=False)
    p.start(wait=False)
    assert notify.next(what="READY=1", proxy=p).get("READY") == "1"
    with Tunnel(p, API, origins.api.port) as t:  # keeps the drain going
        assert t.get("/small")[0] == 200
        p.send_signal(signal.SIGTERM)
        assert notify.next(what="STOPPING=1", proxy=p).get("STOPPING") == "1"
        mark = p.mark()
        p.proc.send_signal(signal.SIGHUP)
        # The daemon may re-read the config or ignore the SIGHUP; either way it logs a reload
        # line, and either way it must not say READY=1 again.
        line = p.wait_for_log(lambda l: l.get("event") == "reload", since=mark,
                              what="the reload line of the SIGHUP sent while draining")
        assert line.get("outcome") in ("ok", "ignored"), line.raw
    assert p.exit_code_after() == 0, p.describe()
    notify.drain()
    keys = [d.keys[0] for d in notify.received if not d.status_only]
    after_stop = keys[keys.index("STOPPING") + 1:]
    assert "READY" not in after_stop, f"READY=1 after STOPPING=1: {notify.received}\n{p.describe()}"


def test_notify_receiver_not_reading_does_not_wedge_the_daemon(make_service_proxy, origins, pki):
    """A notify socket whose reader is stuck (its queue full) must not stop the daemon from
    handling SIGTERM: the control loop must not block on sendto(2)."""
    d = tempfile.mkdtemp(prefix="ppn-", dir="/tmp")
    path = os.path.join(d, "notify")
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stuck.bind(path)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as filler:
            filler.setblocking(False)
            for _ in range(100_000):  # until the kernel queue is full
                try:
                    filler.sendto(b"FILL=1", path)
                except BlockingIOError:
                    break
            else:
                raise AssertionError("could not fill the notify socket's queue")
        p = service_proxy(make_service_proxy, origins, pki, env={"NOTIFY_SOCKET": path})
        assert_allowed(p, origins)  # the workers serve regardless
        p.send_signal(signal.SIGTERM)
        try:
            code = p.proc.wait(15)
        except subprocess.TimeoutExpired:
            try:  # where the main thread (the control loop) sits, for the report
                wchan = Path(f"/proc/{p.pid}/task/{p.pid}/wchan").read_text()
            except OSError:
                wchan = "?"
            p.proc.kill()
            p.proc.wait(10)
            raise AssertionError("pinproxy ignored SIGTERM for 15 s while its NOTIFY_SOCKET queue was full "
                                 f"(drain_timeout is 3 s; main thread in {wchan!r}); killed\n{p.describe()}") from None
        assert code == 0, p.describe()
    finally:
        stuck.close()
        shutil.rmtree(d, ignore_errors=True)


# ==========================================================================
# 2. socket activation


def listening_socket() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    return s


def test_socket_activation_accepts_on_inherited_socket(make_service_proxy, origins, pki, curl, notify_path):
    notify = notify_path
    lsock = listening_socket()
    inherited_port = lsock.getsockname()[1]
    config_port = free_port()
    assert config_port != inherited_port
    try:
        p = service_proxy(make_service_proxy, origins, pki, port=config_port,
                          env={"LISTEN_FDS": "1", "NOTIFY_SOCKET": notify.address},
                          pid_vars=["LISTEN_PID"], inherit_fds=[lsock.fileno()], start=False)
        p.start(wait=False)
        assert notify.next(what="READY=1", proxy=p).get("READY") == "1"
    finally:
        lsock.close()  # from here on only the daemon holds the socket

    lines = p.logs()
    act = [l for l in lines if l.get("event") == "socket-activation"]
    assert act, f"no socket-activation line\n{p.describe()}"
    listening = [l.get("address") for l in lines if l.get("event") == "listening"]
    assert listening == [f"127.0.0.1:{inherited_port}"], f"listening on {listening}\n{p.describe()}"

    p.port = inherited_port  # clients use the inherited socket
    r = run_curl(curl, p, f"https://{API}:{origins.api.port}/small")
    assert r.exit == 0 and (r.connect_code, r.http_code) == (200, 200), f"{r}\n{p.describe()}"
    assert r.body == originlib.SMALL_BODY
    assert p.wait_for_log(lambda l: l.get("event") == "connection" and l.get("outcome") == "allowed")

    assert not port_accepts(config_port), f"proxy.listen 127.0.0.1:{config_port} is bound under socket activation"
    with socket.socket() as probe:  # and nothing holds it: we can bind it ourselves
        probe.bind(("127.0.0.1", config_port))
    assert p.stop() == 0, p.describe()


def test_socket_activation_still_binds_transparent_listen(make_service_proxy, origins, pki, notify_path):
    """The inherited socket replaces proxy.listen only: the daemon binds transparent_listen itself."""
    lsock = listening_socket()
    inherited_port, transparent_port = lsock.getsockname()[1], free_port()
    try:
        p = service_proxy(make_service_proxy, origins, pki, proxy={"transparent_listen": [f"127.0.0.1:{transparent_port}"]},
                          env={"LISTEN_FDS": "1", "NOTIFY_SOCKET": notify_path.address},
                          pid_vars=["LISTEN_PID"], inherit_fds=[lsock.fileno()], start=False)
        p.start(wait=False)
        assert notify_path.next(what="READY=1", proxy=p).get("READY") == "1"
    finally:
        lsock.close()
    listening = [(l.get("address"), l.get("listener")) for l in p.logs() if l.get("event") == "listening"]
    assert listening == [(f"127.0.0.1:{inherited_port}", "connect"), (f"127.0.0.1:{transparent_port}", "transparent")], \
        f"listening on {listening}\n{p.describe()}"
    assert port_accepts(transparent_port)
    assert p.stop() == 0, p.describe()


def test_socket_activation_listen_pid_of_another_process_ignored(make_service_proxy, origins, pki, curl):
    lsock = listening_socket()
    try:
        p = service_proxy(make_service_proxy, origins, pki,
                          env={"LISTEN_FDS": "1", "LISTEN_PID": str(os.getpid())},
                          inherit_fds=[lsock.fileno()])
        assert port_accepts(p.port), f"proxy.listen not bound\n{p.describe()}"
        lines = p.logs()
        assert not [l for l in lines if l.get("event") == "socket-activation"], p.describe()
        listening = [l.get("address") for l in lines if l.get("event") == "listening"]
        assert listening == [f"127.0.0.1:{p.port}"], f"listening on {listening}\n{p.describe()}"
        r = run_curl(curl, p, f"https://{API}:{origins.api.port}/small")
        assert r.exit == 0 and r.http_code == 200 and r.body == originlib.SMALL_BODY, r
    finally:
        lsock.close()


@pytest.mark.parametrize("workers", [1, 4])
def test_socket_activation_two_sockets(make_service_proxy, origins, pki, curl, workers):
    """LISTEN_FDS=2: descriptors 3 and 4, both served (by every worker)."""
    socks = [listening_socket(), listening_socket()]
    ports = [s.getsockname()[1] for s in socks]
    try:
        p = service_proxy(make_service_proxy, origins, pki, proxy={"workers": workers},
                          env={"LISTEN_FDS": "2"}, pid_vars=["LISTEN_PID"],
                          inherit_fds=[s.fileno() for s in socks])
    finally:
        for s in socks:
            s.close()
    listening = sorted(l.get("address") for l in p.logs() if l.get("event") == "listening")
    assert listening == sorted(f"127.0.0.1:{port}" for port in ports), f"{listening}\n{p.describe()}"
    assert "accepting on 2 socket(s)" in p.wait_for_log(lambda l: l.get("event") == "socket-activation").get("detail", "")
    for port in ports:
        p.port = port
        for _ in range(3):  # a few connections, so more than one worker gets some
            r = run_curl(curl, p, f"https://{API}:{origins.api.port}/small")
            assert r.exit == 0 and r.http_code == 200 and r.body == originlib.SMALL_BODY, f"{r}\n{p.describe()}"
    config_port = int(p.proxy_keys["listen"][0].rsplit(":", 1)[1])
    assert not port_accepts(config_port), f"proxy.listen 127.0.0.1:{config_port} is bound under socket activation"
    assert p.stop() == 0, p.describe()


def test_socket_activation_restart_serves_clients_queued_meanwhile(make_service_proxy, origins, pki):
    """The service manager keeps the socket across restarts: a client that connects while no
    daemon runs waits in the backlog and is served by the next instance."""
    lsock = listening_socket()  # the test plays systemd: it keeps its copy open throughout
    port = lsock.getsockname()[1]
    try:
        kw = dict(env={"LISTEN_FDS": "1"}, pid_vars=["LISTEN_PID"], inherit_fds=[lsock.fileno()])
        first = service_proxy(make_service_proxy, origins, pki, name="first", **kw)
        first.port = port
        assert_allowed(first, origins)
        assert first.stop() == 0, first.describe()

        waiting = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)  # into the backlog
        try:
            waiting.sendall(f"CONNECT {API}:{origins.api.port} HTTP/1.1\r\nHost: {API}:{origins.api.port}\r\n\r\n".encode())
            second = service_proxy(make_service_proxy, origins, pki, name="second", **kw)
            second.port = port
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = waiting.recv(4096)
                assert chunk, f"closed after {head!r}\n{second.describe()}"
                head += chunk
            assert head.startswith(b"HTTP/1.1 200 "), head
        finally:
            waiting.close()
        assert_allowed(second, origins)
    finally:
        lsock.close()


@pytest.mark.parametrize("listen_fds", ["0", "1-no-pid"])
def test_socket_activation_not_applicable_binds_listen(make_service_proxy, origins, pki, listen_fds):
    """LISTEN_FDS=0 (for us), or LISTEN_FDS without LISTEN_PID: not activated, proxy.listen is bound."""
    if listen_fds == "0":
        p = service_proxy(make_service_proxy, origins, pki, env={"LISTEN_FDS": "0"}, pid_vars=["LISTEN_PID"])
    else:
        p = service_proxy(make_service_proxy, origins, pki, env={"LISTEN_FDS": "1"})
    assert port_accepts(p.port), f"proxy.listen not bound\n{p.describe()}"
    assert not [l for l in p.logs() if l.get("event") == "socket-activation"], p.describe()
    assert [l.get("address") for l in p.logs() if l.get("event") == "listening"] == [f"127.0.0.1:{p.port}"]
    assert_allowed(p, origins)


def test_socket_activation_fd3_not_a_socket_refuses_to_start(make_service_proxy, origins, pki, tmp_path):
    f = open(tmp_path / "not-a-socket", "wb")
    try:
        p = service_proxy(make_service_proxy, origins, pki, env={"LISTEN_FDS": "1"}, pid_vars=["LISTEN_PID"],
                          inherit_fds=[f.fileno()], start=False)
        p.start(wait=False)
        code = p.exit_code_after()
    finally:
        f.close()
    assert code == 1, p.describe()
    failed = [l for l in p.logs() if l.get("event") == "start-failed"]
    assert failed and "not a listening stream socket" in failed[0].get("error", ""), p.describe()
    assert not port_accepts(p.port)


# ==========================================================================
# 3. journald priorities


def journal_hosts(pki):
    hosts = standard_hosts(pki)
    hosts["127.0.0.1"] = {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X], "enforce": False}
    return hosts


def test_journal_priorities(make_service_proxy, origins, pki):
    p = service_proxy(make_service_proxy, origins, pki, hosts=journal_hosts(pki), start=False)
    p.log_path.touch()
    p.extra_env["JOURNAL_STREAM"] = journal_stream_of(p.log_path)
    p.start()

    allowed = assert_allowed(p, origins)
    assert allowed.raw.startswith("<6>time="), allowed.raw

    _ans, refused = expect_refusal(p, WWW, origins.api.port, "pin-mismatch")
    assert refused.raw.startswith("<4>time="), refused.raw

    with Tunnel(p, "127.0.0.1", origins.ip.port) as t:
        assert t.get("/small") == (200, originlib.SMALL_BODY)
        cport = t.client_port
    report = p.connection_log(cport)
    assert report.get("outcome") == "report-only" and report.get("reason") == "pin-mismatch", report.raw
    assert report.raw.startswith("<4>time="), report.raw

    ok = p.reload()
    assert ok.get("outcome") == "ok" and ok.raw.startswith("<6>"), ok.raw
    p.write_config(broken_config(p))
    failed = p.reload()
    assert failed.get("outcome") == "failed", failed.raw
    assert failed.raw.startswith("<3>time="), failed.raw

    assert p.stop() == 0
    lines = event_lines(p)
    raw = p.raw_lines()
    assert all(re.match(r"<[0-7]>", r) for r in raw if r), "a line without a priority prefix:\n" + "\n".join(raw)
    by_event = {}
    for prefix, l in lines:
        by_event.setdefault(l.get("event"), set()).add(prefix)
    for ev in ("started", "listening", "tunnel-closed", "draining", "stopped"):
        assert by_event.get(ev) == {"<6>"}, f"{ev}: {by_event.get(ev)}\n" + "\n".join(raw)
    # level and prefix agree on every line
    want = {"info": "<6>", "warning": "<4>", "error": "<3>"}
    for prefix, l in lines:
        assert prefix == want[l.get("level")], l.raw


def test_journal_priorities_json_format(make_service_proxy, origins, pki):
    p = service_proxy(make_service_proxy, origins, pki, proxy={"log_format": "json"}, start=False, ready="port")
    p.log_path.touch()
    p.extra_env["JOURNAL_STREAM"] = journal_stream_of(p.log_path)
    p.start()
    with Tunnel(p, API, origins.api.port) as t:
        assert t.get("/small")[0] == 200
    c = connect(p.port, WWW, origins.api.port)
    c.close()
    assert c.answer.status == 403

    def decisions():
        got = [(pre, l) for pre, l in event_lines(p) if l.get("event") == "connection" and l.get("host") in (API, WWW)]
        return got if len(got) >= 2 else None

    got = poll(decisions, what="two connection lines")
    for prefix, l in got:
        assert l.is_json, l.raw
        json.loads(l.raw[3:])
        assert prefix == ("<6>" if l.get("outcome") == "allowed" else "<4>"), l.raw


@pytest.mark.parametrize("stream", ["unset", "other-inode", "stdout-file", "garbage"])
def test_no_journal_stream_no_prefixes(make_service_proxy, origins, pki, stream):
    p = service_proxy(make_service_proxy, origins, pki, start=False)
    p.log_path.touch()
    p.out_path.touch()
    if stream == "other-inode":
        st = os.stat(p.log_path)
        p.extra_env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino + 1}"
    elif stream == "stdout-file":  # names stdout's file: only stderr's identity counts
        p.extra_env["JOURNAL_STREAM"] = journal_stream_of(p.out_path)
    elif stream == "garbage":
        p.extra_env["JOURNAL_STREAM"] = "journal"
    p.start()
    assert_allowed(p, origins)
    expect_refusal(p, WWW, origins.api.port, "pin-mismatch")
    p.write_config(broken_config(p))
    assert p.reload().get("outcome") == "failed"
    assert p.stop() == 0
    raw = [r for r in p.raw_lines() if r]
    assert raw and all(r.startswith("time=") for r in raw), "\n".join(raw)


def test_journal_config_rejected_at_start_is_an_error(make_service_proxy, origins, pki):
    """Why the service did not start must be visible at error priority (`journalctl -p err`)."""
    p = service_proxy(make_service_proxy, origins, pki, start=False)
    p.write_config(broken_config(p, deny_api=False))
    p.log_path.touch()
    p.extra_env["JOURNAL_STREAM"] = journal_stream_of(p.log_path)
    p.start(wait=False)
    assert p.exit_code_after() == 1, p.describe()
    raw = [r for r in p.raw_lines() if r]
    assert raw, p.describe()
    assert all(re.match(r"<[0-3]>", r) for r in raw), \
        "config rejected at start, but not every line has an error priority prefix (<0>..<3>):\n" + "\n".join(raw)


def test_start_failure_logged_as_error(make_service_proxy, origins, pki):
    """A daemon that cannot start (metrics port taken) says so at <3> under journald."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        p = service_proxy(make_service_proxy, origins, pki, proxy={"metrics_listen": f"127.0.0.1:{port}"}, start=False)
        p.log_path.touch()
        p.extra_env["JOURNAL_STREAM"] = journal_stream_of(p.log_path)
        p.start(wait=False)
        assert p.exit_code_after() == 1, p.describe()
    failed = [r for r in p.raw_lines() if "event=start-failed" in r]
    assert failed and failed[0].startswith("<3>"), p.describe()


# ==========================================================================
# 4. metrics


def metrics_config(pki):
    hosts = journal_hosts(pki)
    # api.test: pinned by certificate file (so it has an expiry date)
    hosts[API] = {"trust": ["root-a.pem"], "pin": "public-key", "certificates": ["api.pem"]}
    return hosts


def earliest_not_after(pki, chain: str) -> float:
    """The earliest notAfter of the certificates in CHAIN (leaf and intermediates), in seconds since 1970."""
    return min(c.not_valid_after_utc for c in load_certs(pki.path(chain))).timestamp()


def test_metrics(make_service_proxy, origins, pki):
    prometheus_parser()
    mport = free_port()
    started = time.time()
    p = service_proxy(make_service_proxy, origins, pki, hosts=metrics_config(pki),
                      proxy={"metrics_listen": f"127.0.0.1:{mport}"})
    assert p.wait_for_log(lambda l: l.get("event") == "metrics-listening").get("address") == f"127.0.0.1:{mport}"

    status, headers, body = http_get(mport, "/healthz")
    assert (status, body) == (200, b"ok\n"), (status, body)

    m0 = scrape(mport)
    assert m0.value("pinproxy_config_reloads_total", result="ok") == 0, m0
    assert m0.value("pinproxy_config_reloads_total", result="failed") == 0, m0
    assert m0.value("pinproxy_connections_total", outcome="allowed", reason="none") == 0, m0
    assert m0.value("pinproxy_open_tunnels") == 0, m0
    assert m0.value("pinproxy_config_last_reload_successful") == 1, m0
    loaded = m0.value("pinproxy_config_last_reload_success_timestamp_seconds")
    assert started - 1 <= loaded <= time.time(), (loaded, started)
    [build] = m0.find("pinproxy_build_info")
    assert build.value == 1 and build.labels["version"] and build.labels["commit"], build
    version_line = subprocess.run([p.bin, "--version"], capture_output=True, text=True, check=True).stdout
    assert re.match(rf"pinproxy {re.escape(build.labels['version'])} \(commit {re.escape(build.labels['commit'])}[,)]",
                    version_line), (build.labels, version_line)
    assert m0.value("process_start_time_seconds") == pytest.approx(started, abs=30), m0
    assert m0.value("process_resident_memory_bytes") > 1 << 20, m0
    assert 0 < m0.value("process_open_fds") < m0.value("process_max_fds"), m0
    assert m0.value("process_cpu_seconds_total") > 0, m0
    # Before any chain was verified, the family is there, without a series.
    assert m0.families["pinproxy_upstream_certificate_expiry_timestamp_seconds"].samples == [], m0
    status, headers, _ = http_get(mport, "/metrics")
    assert headers.get("content-type", "").startswith("text/plain"), headers

    # pin expiry: api.test pins api.pem (certificates = [...]); www.api.test pins digests only.
    not_after = load_cert(pki.path("api.pem").read_bytes()).not_valid_after_utc
    want_days = (not_after - dt.datetime.now(dt.timezone.utc)).total_seconds() / 86400
    days = m0.value("pinproxy_pin_expiry_days", host_pattern=API)
    assert days is not None, f"no pinproxy_pin_expiry_days{{host_pattern=\"{API}\"}}\n{m0}"
    assert abs(days - want_days) < 0.1, (days, want_days)
    assert m0.value("pinproxy_pin_expiry_days", host_pattern=WWW) is None, \
        f"digest-only entry without expires has an expiry gauge\n{m0}"
    assert m0.value("pinproxy_pin_expiry_timestamp_seconds", host_pattern=API) == not_after.timestamp(), m0
    assert m0.value("pinproxy_pin_expiry_timestamp_seconds", host_pattern=WWW) is None, m0

    # one allowed tunnel, held open while scraping
    with Tunnel(p, API, origins.api.port) as t:
        assert t.get("/small") == (200, originlib.SMALL_BODY)
        during = scrape(mport)
        assert during.value("pinproxy_open_tunnels") == 1, during
        allowed_port = t.client_port
    poll(lambda: scrape(mport).value("pinproxy_open_tunnels") == 0, what="pinproxy_open_tunnels back to 0")

    expect_refusal(p, WWW, origins.api.port, "pin-mismatch")

    with Tunnel(p, "127.0.0.1", origins.ip.port) as t:
        assert t.get("/small") == (200, originlib.SMALL_BODY)
        report_port = t.client_port
    assert p.connection_log(report_port).get("outcome") == "report-only"

    # a malformed request (no entry applies: host_pattern "-") and an unlisted host (the
    # [default] entry denies: host_pattern "[default]"; the requested name never becomes a label)
    bad = raw_exchange(p.port, b"NOT-HTTP AT ALL\r\n\r\n")
    assert bad.answer.status == 400 and bad.answer.refusal == "bad-request", bad.answer
    expect_refusal(p, "unlisted-7f3a.example", origins.api.port, "host-denied")

    closed = [p.wait_for_log(lambda l, c=c: l.get("event") == "tunnel-closed" and l.get("client") == f"127.0.0.1:{c}")
              for c in (allowed_port, report_port)]
    up = sum(int(l["bytes_up"]) for l in closed)
    down = sum(int(l["bytes_down"]) for l in closed)
    assert up > 0 and down > 0, [l.raw for l in closed]
    poll(lambda: scrape(mport).value("pinproxy_open_tunnels") == 0, what="pinproxy_open_tunnels back to 0")

    m = scrape(mport)
    c = "pinproxy_connections_total"
    assert m.value(c, outcome="allowed", reason="none") == 1, m
    assert m.value(c, outcome="refused", reason="pin-mismatch") == 1, m
    assert m.value(c, outcome="report-only", reason="pin-mismatch") == 1, m
    r = "pinproxy_refusals_total"
    assert m.value(r, host_pattern=WWW, reason="pin-mismatch", mode="enforce") == 1, m
    assert m.value(r, host_pattern="127.0.0.1", reason="pin-mismatch", mode="report-only") == 1, m
    assert m.value(r, host_pattern=API) is None, m
    assert m.value(c, outcome="refused", reason="bad-request") == 1, m
    assert m.value(r, host_pattern="-", reason="bad-request", mode="enforce") == 1, m
    assert m.value(c, outcome="refused", reason="host-denied") == 1, m
    assert m.value(r, host_pattern="[default]", reason="host-denied", mode="enforce") == 1, m
    assert "unlisted-7f3a" not in m.text, m
    b = "pinproxy_relayed_bytes_total"
    assert m.value(b, direction="client_to_upstream") == up, (m.value(b, direction="client_to_upstream"), up)
    assert m.value(b, direction="upstream_to_client") == down, (m.value(b, direction="upstream_to_client"), down)
    for h in ("pinproxy_upstream_handshake_seconds", "pinproxy_verification_seconds"):
        assert m.families[h].type == "histogram", m.families[h]
        assert m.value(h + "_count") >= 1, m
        assert m.value(h + "_bucket", le="+Inf") == m.value(h + "_count"), m
    assert m.value("pinproxy_open_tunnels") == 0, m
    # The chains verified: api.test, www.api.test (refused by its pins, verified all the same)
    # and 127.0.0.1, each an exact host; the unlisted host's [default] entry never got a chain.
    u = "pinproxy_upstream_certificate_expiry_timestamp_seconds"
    assert m.value(u, host_pattern=API) == earliest_not_after(pki, "api-chain.pem"), m
    assert m.value(u, host_pattern=WWW) == earliest_not_after(pki, "api-chain.pem"), m
    assert m.value(u, host_pattern="127.0.0.1") is not None, m
    assert len(m.find(u)) == 3, m

    # reloads: a good one (dropping 127.0.0.1, adding an expires entry), then a broken one
    p.hosts.pop("127.0.0.1")
    p.write_config(p.render() + f'\n[hosts."exp.test"]\npin = "public-key"\npins = ["{PIN_X}"]\nexpires = 2040-01-01\n')
    assert p.reload().get("outcome") == "ok"
    m1 = scrape(mport)
    assert m1.value("pinproxy_config_last_reload_success_timestamp_seconds") > loaded, m1
    assert m1.value(u, host_pattern="127.0.0.1") is None, f"the removed entry kept its series\n{m1}"
    assert m1.value(u, host_pattern=API) is not None, m1
    p.write_config(broken_config(p))
    assert p.reload().get("outcome") == "failed"
    m2 = poll(lambda: (lambda s: s if s.value("pinproxy_config_reloads_total", result="failed") == 1 else None)(scrape(mport)),
              what="config_reloads_total{result=failed} == 1")
    assert m2.value("pinproxy_config_reloads_total", result="ok") == 1, m2
    exp_days = (dt.datetime(2040, 1, 1, tzinfo=dt.timezone.utc) - dt.datetime.now(dt.timezone.utc)).total_seconds() / 86400
    got = m2.value("pinproxy_pin_expiry_days", host_pattern="exp.test")
    assert got is not None and abs(got - exp_days) < 1.01, (got, exp_days, str(m2))
    assert m2.value("pinproxy_pin_expiry_days", host_pattern=API) is not None, m2
    assert m2.value("pinproxy_pin_expiry_timestamp_seconds", host_pattern="exp.test") == \
        dt.datetime(2040, 1, 2, tzinfo=dt.timezone.utc).timestamp(), m2
    assert m2.value("pinproxy_config_last_reload_successful") == 0, m2
    assert m2.value("pinproxy_config_last_reload_success_timestamp_seconds") == \
        m1.value("pinproxy_config_last_reload_success_timestamp_seconds"), m2
    assert p.stop() == 0


def test_healthz_503_while_draining(make_service_proxy, origins, pki):
    mport = free_port()
    p = service_proxy(make_service_proxy, origins, pki, proxy={"metrics_listen": f"127.0.0.1:{mport}", "drain_timeout": 10})
    assert http_get(mport, "/healthz")[0] == 200
    with Tunnel(p, API, origins.api.port) as t:
        assert t.get("/small")[0] == 200
        p.send_signal(signal.SIGTERM)
        p.wait_for_log(lambda l: l.get("event") == "draining")
        status, _h, body = http_get(mport, "/healthz")
        assert status == 503, (status, body)
    assert p.exit_code_after() == 0


# ==========================================================================
# 5. install.sh


def run_install(destdir, binary, **env):
    e = clean_env(DESTDIR=str(destdir), PINPROXY_BINARY=str(binary))
    e.pop("PREFIX", None)
    e.update(env)
    return subprocess.run(["sh", str(REPO / "scripts" / "install.sh")], capture_output=True, text=True,
                          env=e, stdin=subprocess.DEVNULL, timeout=120, cwd=destdir.parent)


def test_install_sh_stages_into_destdir(pinproxy, tmp_path):
    dest = tmp_path / "stage"
    r = run_install(dest, pinproxy)
    assert r.returncode == 0, r.stdout + r.stderr

    binpath = dest / "usr/local/bin/pinproxy"
    assert binpath.read_bytes() == Path(pinproxy).read_bytes()
    assert stat.S_IMODE(binpath.stat().st_mode) == 0o755
    service = dest / "etc/systemd/system/pinproxy.service"
    sock = dest / "etc/systemd/system/pinproxy.socket"
    egress = dest / "etc/systemd/system/pinproxy-egress.service"
    assert service.read_text() == (REPO / "systemd/pinproxy.service").read_text()
    assert sock.read_text() == (REPO / "systemd/pinproxy.socket").read_text()
    assert egress.read_text() == (REPO / "systemd/pinproxy-egress.service").read_text()
    assert "ExecStart=/usr/local/bin/pinproxy run --config /etc/pinproxy/pinproxy.toml" in service.read_text()
    assert "\nUser=pinproxy\n" in service.read_text() and "\nDynamicUser=" not in service.read_text()
    assert "ExecStop=/usr/local/bin/pinproxy egress remove --config /etc/pinproxy/pinproxy.toml" in egress.read_text()
    # Staged: the static user is not created, its useradd command is printed.
    assert "useradd --system" in r.stdout and "pinproxy" in r.stdout, r.stdout
    for unit in (service, sock, egress):
        assert stat.S_IMODE(unit.stat().st_mode) == 0o644, unit
    assert not list(dest.rglob("*.tmp"))
    conf = dest / "etc/pinproxy/pinproxy.toml"
    assert conf.read_text() == (REPO / "config/pinproxy.toml").read_text()

    chk = subprocess.run([str(binpath), "check", "--config", str(conf)], capture_output=True, text=True,
                         timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert chk.returncode == 0, chk.stdout + chk.stderr

    # second run: config kept, binary and units refreshed
    conf.write_text(conf.read_text() + "\n# local edit\n")
    edited = conf.read_text()
    service.write_text("stale\n")
    r2 = run_install(dest, pinproxy)
    assert r2.returncode == 0, r2.stdout + r2.stderr
    assert "keeping existing" in r2.stdout, r2.stdout
    assert conf.read_text() == edited
    assert service.read_text() == (REPO / "systemd/pinproxy.service").read_text()


def test_install_sh_prefix_and_relative_destdir(pinproxy, tmp_path):
    dest = tmp_path / "stage"
    r = subprocess.run(["sh", str(REPO / "scripts/install.sh")], capture_output=True, text=True, cwd=tmp_path,
                       env=clean_env(DESTDIR="stage", PINPROXY_BINARY=str(pinproxy), PREFIX="/opt/pp"),
                       stdin=subprocess.DEVNULL, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (dest / "opt/pp/bin/pinproxy").is_file()
    svc = (dest / "etc/systemd/system/pinproxy.service").read_text()
    assert "ExecStart=/opt/pp/bin/pinproxy run --config /etc/pinproxy/pinproxy.toml" in svc, svc
    assert "ExecReload=/opt/pp/bin/pinproxy reload --config /etc/pinproxy/pinproxy.toml --pid $MAINPID" in svc, svc
    assert "/usr/local/bin/pinproxy" not in svc.split("[Service]")[1]
    egress = (dest / "etc/systemd/system/pinproxy-egress.service").read_text()
    assert "ExecStart=/opt/pp/bin/pinproxy egress apply --config /etc/pinproxy/pinproxy.toml" in egress, egress
    assert "/usr/local/bin/pinproxy" not in egress.split("[Service]")[1]


def test_install_sh_rejects_bad_inputs(pinproxy, tmp_path):
    dest = tmp_path / "stage"
    r = run_install(dest, tmp_path / "missing-binary")
    assert r.returncode == 1 and "no executable pinproxy" in r.stderr, r.stdout + r.stderr
    assert not (dest / "etc").exists()
    r = run_install(dest, pinproxy, PREFIX="usr/local")
    assert r.returncode == 2 and "PREFIX must be an absolute path" in r.stderr, r.stdout + r.stderr


def test_install_sh_installs_man_pages_and_completions_and_uninstalls(pinproxy, tmp_path):
    dest = tmp_path / "stage"
    r = run_install(dest, pinproxy)
    assert r.returncode == 0, r.stdout + r.stderr
    share = dest / "usr/local/share"
    pages = sorted(p.name for p in (share / "man/man1").iterdir())
    helped = json.loads(subprocess.run([str(pinproxy), "--experimental-dump-help"], capture_output=True, text=True,
                                       timeout=TIMEOUT).stdout)
    commands = [c["commandName"] for c in helped["command"]["subcommands"]
                if c["commandName"] != "help" and c.get("shouldDisplay", True)]
    assert {"run", "check", "diagnose", "wait"} <= set(commands), commands
    assert pages == sorted(["pinproxy.1"] + [f"pinproxy-{c}.1" for c in commands]), pages
    for page in pages:
        text = (share / "man/man1" / page).read_text()
        assert text.startswith(f".TH {page[:-2].upper()} 1 "), text[:200]
        shown = subprocess.run(["man", "--warnings", "-l", "-Tutf8", str(share / "man/man1" / page)],
                               capture_output=True, text=True, timeout=TIMEOUT, env=clean_env(MANWIDTH="100"))
        assert shown.returncode == 0 and shown.stderr == "", (page, shown.stderr)
    config_page = share / "man/man5/pinproxy.toml.5"
    assert config_page.read_text().startswith(".TH PINPROXY.TOML 5 ") and "idle_timeout" in config_page.read_text()
    shown = subprocess.run(["man", "--warnings", "-l", "-Tutf8", str(config_page)],
                           capture_output=True, text=True, timeout=TIMEOUT, env=clean_env(MANWIDTH="100"))
    assert shown.returncode == 0 and shown.stderr == "", shown.stderr
    run_page = (share / "man/man1/pinproxy-run.1").read_text()
    assert "\\-\\-config" in run_page and "/etc/pinproxy/pinproxy.toml" in run_page, run_page
    completions = {"bash-completion/completions/pinproxy": "bash", "zsh/site-functions/_pinproxy": "zsh",
                   "fish/vendor_completions.d/pinproxy.fish": "fish"}
    for path, shell in completions.items():
        expected = subprocess.run([str(pinproxy), "--generate-completion-script", shell], capture_output=True,
                                  text=True, timeout=TIMEOUT).stdout
        assert (share / path).read_text() == expected and "diagnose" in expected, path
    bash = subprocess.run(["bash", "-n", str(share / "bash-completion/completions/pinproxy")], capture_output=True)
    assert bash.returncode == 0, bash

    conf = dest / "etc/pinproxy/pinproxy.toml"
    u = subprocess.run(["sh", str(REPO / "scripts/install.sh"), "--uninstall"], capture_output=True, text=True,
                       env=clean_env(DESTDIR=str(dest)), stdin=subprocess.DEVNULL, timeout=120)
    assert u.returncode == 0, u.stdout + u.stderr
    assert "Kept: /etc/pinproxy" in u.stdout, u.stdout
    left = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert left == ["etc/pinproxy/pinproxy.toml"], left
    assert conf.read_text() == (REPO / "config/pinproxy.toml").read_text()
