"""`report_to`: pin-failure reports (RFC 7469 §3 fields plus pinproxy's reason and entry).

A loopback HTTPS collector (other.test, verified by its own [hosts] entry like any other host)
receives one JSON report per refusal or report-only "would refuse" by a certificate reason, in
batches (a JSON array per POST). A file destination gets JSON lines and is reopened on SIGHUP.
With the collector down, reports are dropped, never queued without bound, and the metrics say so.

Bounds: refusals over many distinct IP literals (127.0.x.y, each a host of its own for the
per-host limit; a `HandshakeOrigin` answers on all of them, and `[default]` refuses them as
hostname-mismatch) meet `report_rate_limit` for the whole daemon and `report_file_max_bytes` for
a file; both follow a reload. A file destination is written only when it is a regular file of
the daemon's user with one link: a symbolic link, a FIFO or a hard link planted at the path
receives nothing, and the log names the path.
"""

from __future__ import annotations

import concurrent.futures
import http.server
import json
import os
import select
import ssl
import threading
import time

import pytest

import origin as originlib
from proxy_harness import (
    API,
    connect,
    expect_refusal,
    https_get,
    make_proxy,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    pinned_entry,
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


def reporting_daemon(make_proxy, origins, pki, report_to, start=True, **extra):
    metrics = free_port()
    hosts = {
        API: {"trust": ["root-a.pem"], "pin": "public-key", "pins": [pki.spki("root-b")], **extra},
        "other.test": {"trust": ["root-a.pem"], "ports": [443]},
    }
    proxy = {"allow_ports": [origins.api.port], "report_to": report_to, "metrics_listen": f"127.0.0.1:{metrics}"}
    p = make_proxy(proxy=proxy, resolve={API: "127.0.0.1", "other.test": "127.0.0.1"}, hosts=hosts, start=start)
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


# --------------------------------------------------------------------------
# bounds: report_rate_limit and report_file_max_bytes


def ip_literals(count: int, first: int = 0) -> list[str]:
    """COUNT distinct loopback addresses from 127.0.1.1 on (250 to a /24)."""
    return [f"127.0.{i // 250 + 1}.{i % 250 + 1}" for i in range(first, first + count)]


def ip_literal_daemon(make_proxy, origins, pki, origin, **proxy):
    """A daemon that reports to reports.jsonl: every IP literal is refused hostname-mismatch
    ([default] verifies to root-a, and the api.test leaf names no address); api.test is allowed."""
    metrics = free_port()
    keys = {"allow_ports": [origin.port, origins.api.port], "report_to": ["file:reports.jsonl"],
            "metrics_listen": f"127.0.0.1:{metrics}", **proxy}
    p = make_proxy(proxy=keys, default={"trust": ["root-a.pem"]}, hosts={API: pinned_entry(pki, "api")})
    p.metrics_port = metrics
    p.reports = p.dir / "reports.jsonl"
    return p


def refuse_all(p, origin, addresses, threads: int = 8) -> None:
    """CONNECT to every address (in parallel); each must be refused 403."""
    def one(address):
        c = connect(p.port, address, origin.port)
        c.close()
        return c.answer.status

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        statuses = list(pool.map(one, addresses))
    assert set(statuses) == {403}, {s: statuses.count(s) for s in set(statuses)}


def settled(p, total: int):
    """(metrics,) once TOTAL reports are counted sent or dropped, else None."""
    m = scrape(p.metrics_port)
    done = (m.value("pinproxy_reports_total", result="sent") or 0) + (m.value("pinproxy_reports_total", result="dropped") or 0)
    return (m,) if done >= total else None


def settled_reports(p, total: int):
    """Once every one of TOTAL reports is counted sent or dropped: (metrics, report lines)."""
    m, = poll(lambda: settled(p, total), what=f"{total} reports sent or dropped")
    return m, p.reports.read_bytes().splitlines()


def assert_serves_a_good_client(p, origins) -> None:
    status, body, _, _ = https_get(p, API, origins.api.port, "/small")
    assert status == 200 and body == originlib.SMALL_BODY
    p.assert_alive()


def test_a_flood_over_distinct_ip_literals_meets_the_global_rate_limit(make_proxy, origins, pki):
    # 400 hosts x 10 refusals: each host stays within its own 10 a minute, so only the
    # daemon-wide report_rate_limit (default 600 a minute) stands between 4,000 refusals and
    # 4,000 reports (17 MB). The 20,000 refusals behave the same, five times longer.
    addresses = ip_literals(400)
    with originlib.HandshakeOrigin(pki.path("api-chain.pem"), pki.path("api.key"), addresses) as origin:
        p = ip_literal_daemon(make_proxy, origins, pki, origin)
        started = time.monotonic()
        refuse_all(p, origin, addresses * 10)
        windows = 1 + int((time.monotonic() - started) // 60)
        m, lines = settled_reports(p, 4000)
        assert 600 <= len(lines) <= 600 * windows, (len(lines), windows)
        assert m.value("pinproxy_reports_total", result="sent") == len(lines), m
        assert m.value("pinproxy_reports_total", result="dropped") == 4000 - len(lines), m
        assert {json.loads(line)["pinproxy-reason"] for line in lines} == {"hostname-mismatch"}
        assert len({json.loads(line)["hostname"] for line in lines}) > 10  # many hosts, one allowance
        assert_serves_a_good_client(p, origins)


def test_report_rate_limit_follows_a_reload(make_proxy, origins, pki):
    addresses = ip_literals(40)
    with originlib.HandshakeOrigin(pki.path("api-chain.pem"), pki.path("api.key"), addresses) as origin:
        p = ip_literal_daemon(make_proxy, origins, pki, origin, report_rate_limit=5)
        started = time.monotonic()
        refuse_all(p, origin, addresses[:20])
        m, lines = settled_reports(p, 20)
        windows = 1 + int((time.monotonic() - started) // 60)
        assert 5 <= len(lines) <= 5 * windows, (len(lines), m)
        assert m.value("pinproxy_reports_total", result="dropped") == 20 - len(lines), m
        p.proxy_keys["report_rate_limit"] = 8
        p.write_config()
        assert p.reload().get("outcome") == "ok"
        refuse_all(p, origin, addresses[20:])
        m, lines = settled_reports(p, 40)
        windows = 1 + int((time.monotonic() - started) // 60)
        assert 8 <= len(lines) <= 8 * windows, (len(lines), m)
        assert_serves_a_good_client(p, origins)


def test_a_report_file_stops_at_its_bound_until_reopened(make_proxy, origins, pki):
    addresses = ip_literals(30)
    with originlib.HandshakeOrigin(pki.path("api-chain.pem"), pki.path("api.key"), addresses) as origin:
        # A report of the api.test chain is about 4 KiB: room for three.
        p = ip_literal_daemon(make_proxy, origins, pki, origin, report_file_max_bytes=14_000)
        refuse_all(p, origin, addresses[:10])
        m, lines = settled_reports(p, 10)
        size = p.reports.stat().st_size
        assert 1 <= len(lines) < 10 and size <= 14_000, (len(lines), size)
        assert size + min(len(line) + 1 for line in lines) > 14_000, "dropped while another report still fitted"
        assert m.value("pinproxy_reports_total", result="dropped") == 10 - len(lines), m
        full = [l for l in p.logs() if l.get("event") == "report-failed" and "report_file_max_bytes" in l.get("detail", "")]
        assert len(full) == 1 and str(p.reports) in full[0]["detail"] and full[0]["level"] == "warning", full
        assert_serves_a_good_client(p, origins)

        # A reload that raises the bound applies at once (the same file, reopened).
        p.proxy_keys["report_file_max_bytes"] = 28_000
        p.write_config()
        assert p.reload().get("outcome") == "ok"
        refuse_all(p, origin, addresses[10:20])
        settled_reports(p, 20)
        assert 14_000 < p.reports.stat().st_size <= 28_000

        # Moved away (logrotate) and reopened on SIGHUP: a new file, written again.
        os.rename(p.reports, p.dir / "reports.jsonl.1")
        p.reload()
        refuse_all(p, origin, addresses[20:30])
        m, lines = settled_reports(p, 30)
        assert 1 <= len(lines) < 10 and p.reports.stat().st_size <= 28_000, len(lines)
        assert (p.dir / "reports.jsonl.1").stat().st_size <= 28_000


def test_a_reload_with_a_bad_report_bound_keeps_the_old_policy(make_proxy, origins, pki):
    p = reporting_daemon(make_proxy, origins, pki, ["file:reports.jsonl"])
    for key, value, message in [
        ("report_rate_limit", 0, "proxy.report_rate_limit must be at least 1"),
        ("report_file_max_bytes", -1, "proxy.report_file_max_bytes must be at least 1"),
        ("report_file_max_bytes", "64MiB", "proxy.report_file_max_bytes must be an integer, not a string"),
    ]:
        p.proxy_keys[key] = value
        p.write_config()
        line = p.reload()
        assert line.get("outcome") == "failed" and message in line["error"], line.raw
        number = next(i for i, text in enumerate(p.config_text.splitlines(), 1) if text.startswith(key))
        assert f"{p.config_path}:{number}: " in line["error"], line.raw
        del p.proxy_keys[key]
    expect_refusal(p, API, origins.api.port, "pin-mismatch")  # the old policy still serves


# --------------------------------------------------------------------------
# what a file destination may be


def report_failed(p, path, detail: str, since: int = 0):
    """The `event=report-failed` error line about PATH whose detail holds DETAIL."""
    return p.wait_for_log(lambda l: l.get("event") == "report-failed" and l.get("level") == "error"
                          and f"report file {path}:" in l.get("detail", "") and detail in l.get("detail", ""),
                          since=since, what=f"report-failed naming {path}: {detail}")


PLANTED = {
    "symlink": "it is a symbolic link",
    "dangling-symlink": "it is a symbolic link",
    "fifo": "it is a FIFO, not a regular file",
    "hard-link": "it has 2 links (a hard link)",
    "another-users-file": "it is owned by uid 65534",
}


@pytest.mark.parametrize("kind", PLANTED)
def test_a_report_file_planted_before_start_receives_nothing(make_proxy, origins, pki, tmp_path, kind):
    if kind == "another-users-file" and os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    p = reporting_daemon(make_proxy, origins, pki, ["file:reports.jsonl"], start=False)
    path, target = p.dir / "reports.jsonl", tmp_path / "target"
    reader = None
    if kind in ("symlink", "hard-link"):
        target.write_bytes(b"")
    if kind in ("symlink", "dangling-symlink"):
        os.symlink(target, path)
    elif kind == "hard-link":
        os.link(target, path)
    elif kind == "fifo":
        os.mkfifo(path)
        reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # so that a writer could open it
    elif kind == "another-users-file":
        path.write_bytes(b"")
        os.chown(path, 65534, 65534)
    try:
        p.start()
        expect_refusal(p, API, origins.api.port, "pin-mismatch")
        m, = poll(lambda: settled(p, 1), what="the report sent or dropped")
        if kind == "fifo":
            readable, _, _ = select.select([reader], [], [], 0)
            assert not readable or os.read(reader, 65536) == b"", "a report went into the FIFO"
        elif kind == "dangling-symlink":
            assert not target.exists(), "the link's target was created"
        elif kind == "another-users-file":
            assert path.read_bytes() == b""
        else:
            assert target.read_bytes() == b"", "a report went through the link"
        assert m.value("pinproxy_reports_total", result="dropped") == 1 and m.value("pinproxy_reports_total", result="sent") == 0, m
        report_failed(p, path, PLANTED[kind])
        p.assert_alive()
    finally:
        if reader is not None:
            os.close(reader)


def test_a_link_planted_at_a_rotated_report_file_receives_nothing(make_proxy, origins, pki, tmp_path):
    p = reporting_daemon(make_proxy, origins, pki, ["file:reports.jsonl"])
    path, target = p.dir / "reports.jsonl", tmp_path / "target"
    expect_refusal(p, API, origins.api.port, "pin-mismatch")
    poll(lambda: path.read_bytes().count(b"\n") == 1, what="one report in the file")
    os.rename(path, p.dir / "reports.jsonl.1")
    target.write_bytes(b"")
    os.symlink(target, path)
    mark = p.mark()
    p.reload()  # the file is reopened before the reload line, and before any later report
    expect_refusal(p, API, origins.api.port, "pin-mismatch")
    poll(lambda: settled(p, 2), what="the second report sent or dropped")
    assert target.read_bytes() == b"", "a report went through the link"
    assert (p.dir / "reports.jsonl.1").read_bytes().count(b"\n") == 2, "the file opened before got no report"
    report_failed(p, path, "it is a symbolic link; reports go on to the file opened before", since=mark)


def test_a_report_file_in_the_units_logs_directory(make_proxy, origins, pki, tmp_path):
    # The unit's LogsDirectory=pinproxy under DynamicUser=yes: /var/log/pinproxy is a link to
    # private/pinproxy. Links among the directories are followed; only the file's own name is not.
    logs = tmp_path / "log"
    (logs / "private" / "pinproxy").mkdir(parents=True, mode=0o700)
    os.symlink("private/pinproxy", logs / "pinproxy")
    p = reporting_daemon(make_proxy, origins, pki, [f"file:{logs}/pinproxy/reports.jsonl"])
    expect_refusal(p, API, origins.api.port, "pin-mismatch")
    written = logs / "private" / "pinproxy" / "reports.jsonl"
    poll(lambda: written.exists() and written.read_bytes().count(b"\n") == 1, what="the report in the logs directory")
    assert json.loads(written.read_bytes())["pinproxy-reason"] == "pin-mismatch"
