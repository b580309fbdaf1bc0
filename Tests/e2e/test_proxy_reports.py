"""`report_to`: pin-failure reports (RFC 7469 §3 fields plus pinproxy's reason and entry).

A loopback HTTPS collector (other.test, verified by its own [hosts] entry like any other host)
receives one JSON report per refusal or report-only "would refuse" by a certificate reason, in
batches (a JSON array per POST). A file destination gets JSON lines and is reopened on SIGHUP.
With the collector down, reports are dropped, never queued without bound, and the metrics say so.
"""

from __future__ import annotations

import http.server
import json
import os
import ssl
import threading

from proxy_harness import (
    API,
    connect,
    expect_refusal,
    make_proxy,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    poll,
)
from service_support import scrape
from proxy_harness import free_port


class Collector:
    """An HTTPS server on loopback presenting the other.test chain; keeps every POSTed body."""

    def __init__(self, pki):
        self.reports: list[dict] = []
        self.posts = 0
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                collector.posts += 1
                collector.reports += json.loads(body)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(pki.path("other-chain.pem")), str(pki.path("other.key")))
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def reporting_daemon(make_proxy, origins, pki, report_to, **extra):
    metrics = free_port()
    hosts = {
        API: {"trust": ["root-a.pem"], "pin": "public-key", "pins": [pki.spki("root-b")], **extra},
        "other.test": {"trust": ["root-a.pem"], "ports": [443]},
    }
    proxy = {"allow_ports": [origins.api.port], "report_to": report_to, "metrics_listen": f"127.0.0.1:{metrics}"}
    p = make_proxy(proxy=proxy, resolve={API: "127.0.0.1", "other.test": "127.0.0.1"}, hosts=hosts)
    p.metrics_port = metrics
    return p


def test_a_pin_refusal_is_reported_to_the_collector(make_proxy, origins, pki):
    collector = Collector(pki)
    try:
        p = reporting_daemon(make_proxy, origins, pki, [f"https://other.test:{collector.port}/reports"])
        # The collector's own entry must admit its port.
        p.hosts["other.test"]["ports"] = [collector.port]
        p.write_config()
        p.reload()
        expect_refusal(p, API, origins.api.port, "pin-mismatch")
        poll(lambda: collector.reports, what="a report at the collector")
        report = collector.reports[0]
        assert report["hostname"] == API and report["port"] == origins.api.port, report
        assert report["pinproxy-reason"] == "pin-mismatch" and report["pinproxy-enforced"] is True, report
        assert report["pinproxy-entry"] == f'hosts."{API}"' and report["noted-hostname"] == API, report
        assert report["known-pins"] == [f'pin-sha256="{pki.spki("root-b").removeprefix("sha256/")}"'], report
        assert len(report["served-certificate-chain"]) == 2 and "BEGIN CERTIFICATE" in report["served-certificate-chain"][0]
        assert len(report["validated-certificate-chain"]) == 3, report  # leaf, intermediate, root-a
        assert report["include-subdomains"] is False and report["effective-expiration-date"] is None
        assert "date-time" in report
        m = scrape(p.metrics_port)
        assert m.value("pinproxy_reports_total", result="sent") == 1, m
    finally:
        collector.close()


def test_a_collector_that_fails_its_own_policy_gets_nothing(make_proxy, origins, pki):
    collector = Collector(pki)
    try:
        p = reporting_daemon(make_proxy, origins, pki, [f"https://other.test:{collector.port}/reports"])
        p.hosts["other.test"] = {"trust": ["root-a.pem"], "ports": [collector.port], "pin": "public-key",
                                 "pins": [pki.spki("root-b")]}
        p.write_config()
        p.reload()
        expect_refusal(p, API, origins.api.port, "pin-mismatch")
        p.wait_for_log(lambda l: l.get("event") == "report-failed" and "collector was refused" in l.get("detail", ""),
                       what="the collector refused by its own pins")
        assert collector.posts == 0
    finally:
        collector.close()


def test_report_only_and_the_file_destination_reopened_on_sighup(make_proxy, origins, pki, tmp_path):
    p = reporting_daemon(make_proxy, origins, pki, ["file:reports.jsonl"], enforce=False)
    path = p.dir / "reports.jsonl"
    c = connect(p.port, API, origins.api.port)
    c.close()
    assert c.answer.status == 200
    poll(lambda: path.exists() and path.read_text().count("\n") == 1, what="one JSON line")
    report = json.loads(path.read_text())
    assert report["pinproxy-reason"] == "pin-mismatch" and report["pinproxy-enforced"] is False, report
    os.rename(path, p.dir / "reports.jsonl.1")
    p.reload()
    c = connect(p.port, API, origins.api.port)
    c.close()
    poll(lambda: path.exists() and path.read_text().count("\n") == 1, what="a new file after SIGHUP")


def test_with_the_collector_down_reports_are_dropped_not_queued(make_proxy, origins, pki):
    closed = free_port()
    p = reporting_daemon(make_proxy, origins, pki, [f"https://other.test:{closed}/reports"])
    p.hosts["other.test"]["ports"] = [closed]
    p.hosts[API]["include_subdomains"] = True
    names = [f"h{i}.{API}" for i in range(20)]
    p.resolve.update({name: "127.0.0.1" for name in names})
    p.write_config()
    p.reload()
    for name in names:          # 20 hosts x 10 = 200 reports: a rate of 10 per host a minute
        for _ in range(11):     # and the 11th of each host is dropped by the rate limit
            c = connect(p.port, name, origins.api.port)
            c.close()
            assert c.answer.status == 403
    m = scrape(p.metrics_port)
    queued = m.value("pinproxy_reports_total", result="queued") or 0
    dropped = m.value("pinproxy_reports_total", result="dropped") or 0
    assert m.value("pinproxy_reports_total", result="sent") in (None, 0), m
    assert dropped >= 20 + 50, m  # 20 by the rate limit, at least 50 by the full queue
    assert queued <= 150, m       # one batch in flight (50) plus the queue (100)
    p.assert_alive()
