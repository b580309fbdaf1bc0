"""`pinproxy run`: `enforce = false` (report-only).

A certificate or pin failure under enforce = false is allowed — the client gets the
tunnel and the origin's body — and logged as outcome=report-only with the reason it
would have been refused for.  Failures that leave nothing to tunnel to (the upstream
is unreachable) are still refused.
"""

from __future__ import annotations

import pytest

import origin as originlib
from proxy_harness import (
    API,
    PIN_X,
    PIN_Y,
    Tunnel,
    curl,  # noqa: F401 (fixture)
    expect_refusal,
    module_proxies,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    run_curl,
    sha256,
)


@pytest.fixture(scope="module")
def proxy(module_proxies, origins):
    return module_proxies(
        proxy={"allow_ports": [origins.api.port, origins.untrusted.port, origins.closed.port]},
        resolve={API: "127.0.0.1", "www.api.test": "127.0.0.1"},
        hosts={
            API: {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X, PIN_Y], "enforce": False},
            "www.api.test": {"trust": ["root-a.pem"], "enforce": False},
        },
    )


def report_only_line(proxy, client_port: int):
    line = proxy.connection_log(client_port)
    assert line.get("outcome") == "report-only", line.raw
    return line


def test_pin_mismatch_allowed_and_reported(proxy, origins, pki):
    with Tunnel(proxy, API, origins.api.port) as t:
        assert t.get("/small") == (200, originlib.SMALL_BODY)
        cport = t.client_port
    line = report_only_line(proxy, cport)
    assert line.get("reason") == "pin-mismatch", line.raw
    assert line.get("entry") == 'hosts."api.test"', line.raw
    assert pki.spki("api") in line.get("chain", ""), line.raw
    proxy.wait_for_log(lambda l: l.get("event") == "tunnel-closed" and l.get("client") == f"127.0.0.1:{cport}",
                       what="the report-only tunnel's tunnel-closed line")


def test_pin_mismatch_report_only_with_curl_big_body(proxy, origins, curl):
    r = run_curl(curl, proxy, f"https://{API}:{origins.api.port}/big")
    assert r.exit == 0 and r.http_code == 200, r
    assert len(r.body) == originlib.BIG_SIZE and sha256(r.body) == originlib.big_sha256()


def test_untrusted_chain_allowed_and_reported(proxy, origins, pki):
    with Tunnel(proxy, "www.api.test", origins.untrusted.port) as t:
        assert t.get("/small") == (200, originlib.SMALL_BODY)
        cport = t.client_port
    line = report_only_line(proxy, cport)
    assert line.get("reason") == "untrusted-chain", line.raw
    assert pki.spki("untrusted") in line.get("chain", ""), line.raw


def test_unreachable_upstream_still_refused(proxy, origins):
    """Report-only relaxes the policy, not physics: there is nothing to tunnel to."""
    expect_refusal(proxy, API, origins.closed.port, "upstream-unreachable")
