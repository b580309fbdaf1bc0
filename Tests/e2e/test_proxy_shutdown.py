"""`pinproxy run`: SIGTERM / SIGINT.

The daemon stops accepting at once, lets open tunnels finish for up to drain_timeout,
and exits 0: as soon as the last tunnel closes, or when drain_timeout cuts the ones
still open.  Each test has its own daemon.
"""

from __future__ import annotations

import base64
import os
import signal
import ssl
import time

import pytest

import origin as originlib
from proxy_harness import (
    API,
    TIMEOUT,
    Tunnel,
    make_proxy,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    pinned_entry,
    poll,
    port_accepts,
    read_to_eof,
)


def start(make_proxy, origins, pki, drain: int):
    return make_proxy(
        proxy={"allow_ports": [origins.api.port], "drain_timeout": drain},
        hosts={API: pinned_entry(pki, "api", "int-a")},
    )


def wait_not_accepting(p) -> None:
    poll(lambda: not port_accepts(p.port), TIMEOUT,
         what=f"pinproxy to stop accepting on 127.0.0.1:{p.port} after the signal\n{p.describe()}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_drains_open_tunnel_then_exits_0(make_proxy, origins, pki, sig):
    drain = 30
    p = start(make_proxy, origins, pki, drain)
    t = Tunnel(p, API, origins.api.port)
    try:
        assert t.get("/small") == (200, originlib.SMALL_BODY)
        p.send_signal(sig)
        t0 = time.monotonic()
        wait_not_accepting(p)

        # The open tunnel still carries requests after the signal.
        n = 1 << 20
        assert t.get(f"/bytes/{n}") == (200, originlib.big_body()[:n])
        assert t.get("/small") == (200, originlib.SMALL_BODY)
        p.assert_alive("while a tunnel is still open and drain_timeout has not passed")
        cport = t.client_port
    finally:
        t.close()
    code = p.wait_exit(TIMEOUT)
    elapsed = time.monotonic() - t0
    assert code == 0, p.describe()
    assert elapsed < drain, f"exited {elapsed:.1f}s after the signal: it waited for drain_timeout, not the tunnel"
    p.wait_for_log(lambda l: l.get("event") == "tunnel-closed" and l.get("client") == f"127.0.0.1:{cport}",
                   timeout=1, what="the drained tunnel's tunnel-closed line")


def test_drain_timeout_cuts_idle_tunnel(make_proxy, origins, pki):
    drain = 1
    p = start(make_proxy, origins, pki, drain)
    with Tunnel(p, API, origins.api.port) as t:
        assert t.get("/small") == (200, originlib.SMALL_BODY)
        p.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        code = p.wait_exit(drain + TIMEOUT)
        elapsed = time.monotonic() - t0
        assert code == 0, p.describe()
        assert elapsed >= drain * 0.8, f"exited {elapsed:.2f}s after SIGTERM, before drain_timeout = {drain}s"
        assert elapsed < drain + 10, f"exited only {elapsed:.1f}s after SIGTERM (drain_timeout = {drain}s)"
        # The client's tunnel is gone.
        try:
            data, how = read_to_eof(t.tls, TIMEOUT)
        except (ssl.SSLError, OSError):
            data = b""
        assert data == b"", f"data after the cut: {data[:100]!r}"


def test_sigterm_without_tunnels_exits_promptly(make_proxy, origins, pki):
    p = start(make_proxy, origins, pki, 30)
    with Tunnel(p, API, origins.api.port) as t:  # some traffic first, then nothing open
        assert t.get("/small") == (200, originlib.SMALL_BODY)
        cport = t.client_port
    p.wait_for_log(lambda l: l.get("event") == "tunnel-closed" and l.get("client") == f"127.0.0.1:{cport}")
    t0 = time.monotonic()
    code = p.stop(signal.SIGTERM, timeout=TIMEOUT)
    assert code == 0, p.describe()
    assert time.monotonic() - t0 < 10, "idle daemon took long to exit on SIGTERM"
    assert not port_accepts(p.port)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_as_soon_as_ready_exits_0(make_proxy, origins, pki, sig):
    """Ready means the listen port accepts (the contract), so a supervisor may stop the daemon
    from that moment on: it must exit 0, not die of the signal's default action.
    Repeated, as it is a race."""
    for i in range(5):
        p = make_proxy(name=f"early{i}", proxy={"allow_ports": [origins.api.port]},
                       hosts={API: pinned_entry(pki, "api", "int-a")})
        code = p.stop(sig, timeout=TIMEOUT)
        assert code == 0, f"attempt {i}: exit {code}\n{p.describe()}"


def test_stop_during_reload_lets_the_reload_finish(make_proxy, origins, pki):
    """SIGTERM right after SIGHUP: the reload that is still reading a large config finishes
    (its line is logged) before the daemon says `stopped` and exits 0; exit never cuts it."""
    p = start(make_proxy, origins, pki, drain=3)
    # Long enough to load that the stop arrives while the reload runs, short enough that the
    # reload ends well within the daemon's wait at exit (5 s) even in a sanitizer build on a
    # busy machine (4,000 entries take about 1 s to load under AddressSanitizer on an idle one).
    entries = 4_000 if os.environ.get("PINPROXY_SANITIZER") else 60_000
    digest = "sha256/" + base64.b64encode(bytes(32)).decode()
    lines = [p.config_text]
    lines += [f'[hosts."h{i}.example"]\npins = ["{digest}"]\n' for i in range(entries)]
    p.write_config("\n".join(lines))
    mark = p.mark()
    p.send_signal(signal.SIGHUP)
    p.send_signal(signal.SIGTERM)
    assert p.wait_exit(timeout=60) == 0
    events = [l.get("event") for l in p.logs(since=mark)]
    assert "reload" in events and "stopped" in events, p.describe()
    assert events.index("reload") < events.index("stopped"), p.describe()
