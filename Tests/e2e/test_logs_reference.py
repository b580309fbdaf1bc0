"""docs/logs-and-metrics.md is the reference of every log line and metric; this checks the
daemon against it, parsing the document's tables so that the two cannot drift.

- Every event the source writes has a table, and every table names events the source writes;
  every field of `AccessLog.Field` is documented, with one type everywhere.
- Two daemons (JSON and logfmt) go through the events the test can cause: start (with a
  config warning and a connection-limit warning), allowed, refused, report-only and client-gone
  connections, a bad request, a request timeout, a failed client handshake, an SNI mismatch, a
  refusal inside TLS, reloads (ok, restart-only warning, failed), a failed report, draining and
  stopping; a third fails to start. Every line of theirs is checked against its table: each
  field documented for its event, with the documented JSON type (logfmt: text that parses as
  that type), and every field the table says is always there, there.
- The metric table lists exactly the families a live /metrics declares.
"""

from __future__ import annotations

import json
import re
import socket
import ssl

import pytest

import origin as originlib
from proxy_harness import (
    API,
    PIN_X,
    REPO,
    Tunnel,
    connect,
    expect_refusal,
    free_port,
    make_proxy,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    parse_logfmt,
    pinned_entry,
    raw_exchange,
)
from service_support import http_get

DOC = REPO / "docs/logs-and-metrics.md"
WWW = "www.api.test"
REPORT_ONLY = "127.0.0.1"

def is_certificate(value) -> bool:
    return isinstance(value, dict) and set(value) == {"subject", "spki"} and all(isinstance(v, str) for v in value.values())


# Each documented type: what a JSON value of it is, and whether a logfmt text can be one.
JSON_TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "array of strings": lambda v: isinstance(v, list) and all(isinstance(e, str) for e in v),
    "array of certificates": lambda v: isinstance(v, list) and all(map(is_certificate, v)),
}
LOGFMT_TYPES = {
    "string": lambda t: True,
    "integer": lambda t: re.fullmatch(r"-?(0|[1-9][0-9]*)", t) is not None,
    "number": lambda t: re.fullmatch(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?", t) is not None,
    "array of strings": lambda t: True,
    "array of certificates": lambda t: False,
}


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the first Markdown table in TEXT (cells split on unescaped `|`)."""
    rows = [l for l in text.splitlines() if l.startswith("|")]
    return [[c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", l.strip())[1:-1]] for l in rows[2:]]


def section(title: str) -> str:
    doc = DOC.read_text()
    return doc.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def log_reference() -> dict[str, dict[str, tuple[str, bool, bool, str | None]]]:
    """{event: {field: (type, always, dash, only)}} from the `### event=…` tables; DASH: logfmt
    writes `-` when it has no value, and JSON leaves it out; ONLY: `json` or `logfmt` for a field
    of one format."""
    reference = {}
    for part in re.split(r"^### ", section("Log lines"), flags=re.M)[1:]:
        heading, body = part.split("\n", 1)
        events = re.findall(r"`event=([a-z-]+)`", heading)
        assert events, f"a table heading names no event: {heading}"
        fields = {}
        for name, kind, when in table_rows(body):
            assert kind in JSON_TYPES, f"{heading}: {name} has an unknown type {kind!r}"
            only = "json" if "JSON only" in when else "logfmt" if "logfmt only" in when else None
            fields[name.strip("`")] = (kind, when.startswith("always"), "`-` in logfmt" in when, only)
        for event in events:
            assert event not in reference, f"event={event} has two tables"
            reference[event] = fields
    return reference


def source_events() -> set[str]:
    found = set()
    for path in (REPO / "Sources").rglob("*.swift"):
        found |= set(re.findall(r'\b(?:emit|logEvent)\([^,()"]*,\s*"([a-z][a-z-]*)"', path.read_text()))
    return found


def source_fields() -> set[str]:
    text = (REPO / "Sources/PinproxyProxy/AccessLog.swift").read_text()
    body = text.split("public enum Field", 1)[1].split("var jsonType", 1)[0]
    names = set()
    for case in re.findall(r"^\s*case (.+)$", body, re.M):
        for item in case.split(","):
            m = re.fullmatch(r'\s*(\w+)(?:\s*=\s*"([a-z_]+)")?\s*', item)
            assert m, f"cannot read the Field case {item!r}"
            names.add(m.group(2) or m.group(1))
    return names


def test_every_event_and_field_of_the_source_is_documented_once():
    reference = log_reference()
    assert set(reference) == source_events(), (
        f"documented but not written: {sorted(set(reference) - source_events())}; "
        f"written but not documented: {sorted(source_events() - set(reference))}")
    documented = {field for fields in reference.values() for field in fields}
    assert documented == source_fields() | {"time", "level", "event"}, (
        sorted(documented ^ (source_fields() | {"time", "level", "event"})))
    types: dict[str, set[str]] = {}
    for fields in reference.values():
        for field, (kind, *_rest) in fields.items():
            types.setdefault(field, set()).add(kind)
    assert all(len(kinds) == 1 for kinds in types.values()), {f: k for f, k in types.items() if len(k) > 1}


def check_line(raw: str, reference) -> str:
    """Checks one raw log line against the reference; returns its event."""
    text = raw.strip()
    if text.startswith("{"):
        obj = json.loads(text)
        assert isinstance(obj, dict), raw
        values = obj
    else:
        values = parse_logfmt(text)
    event = values.get("event")
    assert event in reference, f"event={event} is not in docs/logs-and-metrics.md: {raw}"
    fields = reference[event]
    fmt = "json" if text.startswith("{") else "logfmt"
    for key, value in values.items():
        assert key in fields, f"field {key} is not documented for event={event}: {raw}"
        kind, _always, dash, only = fields[key]
        assert only in (None, fmt), f"{key} is documented for {only} lines only: {raw}"
        if fmt == "json":
            assert JSON_TYPES[kind](value), f"{key} is {json.dumps(value)}, documented {kind}: {raw}"
            assert value != "-", f"JSON leaves a field without a value out, not '-': {raw}"
        elif not (dash and value == "-"):
            assert LOGFMT_TYPES[kind](value), f"{key}={value!r} is not a {kind}: {raw}"
    for key, (_kind, always, dash, only) in fields.items():
        if always and only in (None, fmt) and not (dash and fmt == "json"):
            assert key in values, f"event={event} lacks {key}, which is always there: {raw}"
    return event


def drive(p, origins) -> None:
    """Every event the test can cause, on daemon P."""
    with Tunnel(p, API, origins.api.port) as t:
        assert t.get("/small") == (200, originlib.SMALL_BODY)
    expect_refusal(p, WWW, origins.api.port, "pin-mismatch")
    with Tunnel(p, REPORT_ONLY, origins.ip.port) as t:
        assert t.get("/small")[0] == 200
    assert raw_exchange(p.port, b"hello\r\n\r\n").answer.refusal == "bad-request"
    # client-gone: the upstream never answers its handshake, and the client leaves.
    s = socket.create_connection(("127.0.0.1", p.port))
    s.sendall(f"CONNECT {API}:{origins.silent.port} HTTP/1.1\r\n\r\n".encode())
    gone = s.getsockname()[1]
    s.close()
    p.wait_for_log(lambda l: l.get("client") == f"127.0.0.1:{gone}" and l.get("outcome") == "client-gone", what="client-gone")
    # request-timeout (request_timeout = 1): half a request.
    s = socket.create_connection(("127.0.0.1", p.port))
    s.sendall(b"CONNECT api.test:443 HTTP/1.1\r\n")
    p.wait_for_log(lambda l: l.get("event") == "request-timeout", what="request-timeout")
    s.close()
    # client-handshake-failed: not a ClientHello after the 200.
    c = connect(p.port, API, origins.api.port)
    c.sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
    p.wait_for_log(lambda l: l.get("event") == "client-handshake-failed", what="client-handshake-failed")
    c.close()
    # sni-mismatch: a ClientHello for another host.
    c = connect(p.port, API, origins.api.port)
    ctx = p.client_context()
    ctx.check_hostname = False
    try:
        ctx.wrap_socket(c.sock, server_hostname="other.test").close()
    except (ssl.SSLError, OSError):
        pass
    p.wait_for_log(lambda l: l.get("event") == "sni-mismatch", what="sni-mismatch")
    c.close()
    # reloads: in-TLS refusals and another worker count (restart-only), then a broken file.
    p.proxy_keys.update(refusal="in-tls", workers=3)
    p.write_config()
    assert p.reload().get("outcome") == "ok"
    p.wait_for_log(lambda l: l.get("event") == "reload" and "restart-only" in l.get("detail", ""), what="restart-only warning")
    t = Tunnel(p, WWW, origins.api.port)
    t.conn.request("GET", "/", headers={"Host": WWW})
    assert t.conn.getresponse().status == 403
    t.close()
    p.wait_for_log(lambda l: l.get("event") == "refusal-in-tls", what="refusal-in-tls")
    p.wait_for_log(lambda l: l.get("event") == "report-failed", what="report-failed")
    p.write_config("[proxy\n")
    assert p.reload().get("outcome") == "failed"


def test_every_line_matches_its_table(make_proxy, origins, pki, tmp_path):
    reference = log_reference()
    seen: dict[str, set[str]] = {}
    for fmt in ("json", "logfmt"):
        metrics = free_port()
        p = make_proxy(
            name=fmt,
            proxy={"allow_ports": [origins.api.port, origins.silent.port, origins.ip.port], "log_format": fmt, "request_timeout": 1,
                   "handshake_timeout": 5, "metrics_listen": f"127.0.0.1:{metrics}", "max_connections": 1_000_000,
                   "report_to": [f"file:{tmp_path}/missing-{fmt}/reports.jsonl"]},
            resolve={API: "127.0.0.1", WWW: "127.0.0.1"},
            hosts={API: pinned_entry(pki, "api", "int-a"),
                   # one pin and no backup: a config warning
                   WWW: {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X]},
                   REPORT_ONLY: {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X, pki.spki("root-b")],
                                 "enforce": False}})
        p.wait_for_log(lambda l: l.get("event") == "metrics-listening", what="metrics-listening")
        drive(p, origins)
        # A second daemon on the same address does not start.
        twin = make_proxy(name=f"{fmt}-twin", start=False, port=p.port, proxy={"allow_ports": [1], "log_format": fmt})
        twin.start(wait=False)
        twin._stopped = True  # its exit is expected
        assert twin.wait_exit() == 1, twin.describe()
        assert p.stop() == 0
        lines = [l for l in p.raw_lines() + twin.raw_lines() if l.strip()]
        for raw in lines:
            if fmt == "json":
                assert raw.startswith("{"), f"a JSON daemon wrote a line that is not JSON: {raw}"
            seen.setdefault(fmt, set()).add(check_line(raw, reference))
    # A rejected config is always logfmt.
    bad = make_proxy(name="rejected", start=False, config_text="[proxy]\nlisten = 7\n")
    bad.start(wait=False)
    bad._stopped = True
    assert bad.wait_exit() == 1
    seen["rejected"] = {check_line(raw, reference) for raw in bad.raw_lines() if raw.strip()}
    assert seen["rejected"] == {"config-rejected", "start-failed"}, bad.describe()

    caused = {"started", "config-warning", "listening", "metrics-listening", "connection", "tunnel-closed",
              "request-timeout", "client-handshake-failed", "sni-mismatch", "refusal-in-tls", "reload", "report-failed",
              "draining", "stopped", "start-failed"}
    for fmt in ("json", "logfmt"):
        assert caused <= seen[fmt], f"{fmt}: not seen {sorted(caused - seen[fmt])}"


def test_the_metric_table_lists_what_metrics_exports(make_proxy, pki):
    documented = {row[0].strip("`") for row in table_rows(section("Metrics"))}
    port = free_port()
    p = make_proxy(proxy={"metrics_listen": f"127.0.0.1:{port}", "allow_ports": [443]}, hosts={API: pinned_entry(pki, "api", "int-a")})
    p.wait_for_log(lambda l: l.get("event") == "metrics-listening", what="metrics-listening")
    status, _headers, body = http_get(port, "/metrics")
    assert status == 200
    exported = set(re.findall(r"^# TYPE (\S+) ", body.decode(), re.M))
    assert documented == exported, f"documented only: {sorted(documented - exported)}; exported only: {sorted(exported - documented)}"
