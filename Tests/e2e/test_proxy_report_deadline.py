"""`report_to` with an HTTPS collector whose handshake trickles in one byte a second.

The report sender's 10 s bound connect, handshake and answer together: the delivery attempt
fails with "timed out after 10 s" (logged as `event=report-failed`) instead of taking as many
minutes as the handshake has bytes, and the daemon keeps serving meanwhile.
"""

from __future__ import annotations

from flight_origin import FlightServer
from proxy_harness import (
    API,
    connect,
    expect_refusal,
    make_proxy,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
)

SENDER_TIMEOUT = 10


def test_a_trickling_collector_times_out_at_the_senders_timeout(make_proxy, origins, pki):
    collector = FlightServer(str(pki.path("other-chain.pem")), str(pki.path("other.key")), fast=(), rest="trickle")
    try:
        hosts = {
            API: {"trust": ["root-a.pem"], "pin": "public-key", "pins": [pki.spki("root-b")]},
            "other.test": {"trust": ["root-a.pem"], "ports": [collector.port]},
        }
        proxy = {"allow_ports": [origins.api.port], "report_to": [f"https://other.test:{collector.port}/reports"]}
        p = make_proxy(proxy=proxy, resolve={API: "127.0.0.1", "other.test": "127.0.0.1"}, hosts=hosts)
        expect_refusal(p, API, origins.api.port, "pin-mismatch")
        # Generous: the sender's timeout plus the time the first attempt takes to start.
        line = p.wait_for_log(lambda l: l.get("event") == "report-failed", timeout=SENDER_TIMEOUT + 10,
                              what="the first delivery attempt failing")
        assert collector.trickled.is_set(), "the collector sent nothing"
        assert f"timed out after {SENDER_TIMEOUT} s" in line.get("detail", ""), line
        # The daemon served meanwhile, and still does.
        c = connect(p.port, API, origins.api.port)
        c.close()
        assert c.answer.status == 403
        p.assert_alive()
    finally:
        collector.close()
