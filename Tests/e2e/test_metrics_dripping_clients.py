"""`pinproxy run`: clients dripping bytes into metrics_listen are cut off, proxy clients go on.

evhttp's timeout restarts on every byte it reads, so a client sending one header byte every
half second held an admin connection for ever; enough of them used up the descriptors and the
proxy stopped serving. Now each admin request has a total deadline (`admin_timeout`), admin
connections are capped within the open-file budget, and the daemon runs here under a low
open-file limit (128). Sixty drippers, several times the cap: every one is closed by the
daemon while it still drips, a proxy client is served all along, the daemon's descriptors
stay within the budget, no accept error is logged, and /healthz answers once they are gone.
"""

from __future__ import annotations

import time

from admin_drip import Drippers, LimitedProxy
from proxy_harness import API, TIMEOUT, free_port, https_get, origins, pinned_entry, poll, proxy_factory  # noqa: F401
from service_support import http_get

import origin as originlib
import pytest

ADMIN_CAP = 16  # AdminHTTPServer.defaultMaxConnections


def healthz(port: int) -> int:
    try:
        return http_get(port, "/healthz", timeout=5)[0]
    except OSError:
        return 0


class Limited128(LimitedProxy):
    nofile = 128


@pytest.fixture
def make_limited(pinproxy, pki, tmp_path):
    yield from proxy_factory(Limited128, pinproxy, pki, tmp_path)


def test_dripping_admin_clients_are_cut_and_the_proxy_keeps_serving(make_limited, origins, pki):
    mport = free_port()
    p = make_limited(proxy={"allow_ports": [origins.api.port], "metrics_listen": f"127.0.0.1:{mport}",
                            "admin_timeout": 2, "workers": 2},
                     hosts={API: pinned_entry(pki, "api", "int-a")})
    assert poll(lambda: healthz(mport) == 200, what="/healthz")
    baseline = p.descriptors()

    drippers = Drippers(mport, 60, interval=0.5)
    try:
        peak = baseline
        served = 0
        deadline = time.monotonic() + 3 * TIMEOUT
        while not drippers.all_closed():
            assert time.monotonic() < deadline, f"{len(drippers.closed)} of 60 drippers closed\n{p.describe()}"
            status, body, _, _ = https_get(p, API, origins.api.port, "/small")
            assert (status, body) == (200, originlib.SMALL_BODY)
            served += 1
            peak = max(peak, p.descriptors())
            time.sleep(0.2)
        assert min(drippers.sent) > 0
    finally:
        drippers.close()

    assert served > 0
    # Admin connections at most the cap, plus a tunnel (two) and a little slack.
    assert peak <= baseline + ADMIN_CAP + 2 + 4, (baseline, peak)
    assert http_get(mport, "/healthz")[0] == 200
    raw = "\n".join(p.raw_lines())
    assert "Error from accept" not in raw and "accept-failed" not in raw, p.describe()
    p.assert_alive()
