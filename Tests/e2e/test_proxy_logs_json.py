"""`pinproxy run` with `log_format = "json"`.

Every stderr line is one JSON object, and each event carries the same keys as the
logfmt line for the same event (less those logfmt writes as `-`, which JSON leaves out), numbers
as numbers: two daemons (logfmt and json, same policy) see the
same traffic — an allowed tunnel, a pin-mismatch, a bad request, a reload — and their
lines are compared key for key. Certificates are the one difference: logfmt's `chain` text is
JSON's `presented_chain` and `verified_chain` arrays, and `verified_pins` is a list in both.
"""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest

import origin as originlib
from proxy_harness import (
    API,
    PIN_X,
    PIN_Y,
    Tunnel,
    expect_refusal,
    module_proxies,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    dns_isolation,
    parse_logfmt,
    pinned_entry,
    raw_exchange,
)


def traffic(proxy, origins) -> dict[str, int]:
    """The same four events on PROXY; {scenario: client port} (reload: none)."""
    ports = {}
    with Tunnel(proxy, API, origins.api.port) as t:
        assert t.get("/small") == (200, originlib.SMALL_BODY)
        ports["allowed"] = t.client_port
    ports["tunnel-closed"] = ports["allowed"]
    _ans, line = expect_refusal(proxy, "www.api.test", origins.api.port, "pin-mismatch")
    ports["refused"] = int(line["client"].rsplit(":", 1)[1])
    ex = raw_exchange(proxy.port, b"hello\r\n\r\n")
    ports["bad-request"] = ex.client_port
    assert ex.answer.refusal == "bad-request"
    assert proxy.reload().get("outcome") == "ok"
    return ports


@pytest.fixture(scope="module")
def pair(module_proxies, origins, pki):
    made = {}
    for fmt in ("logfmt", "json"):
        made[fmt] = module_proxies(
            name=fmt,
            proxy={"allow_ports": [origins.api.port], "log_format": fmt, "dns_timeout": 2},
            resolve={API: "127.0.0.1", "www.api.test": "127.0.0.1"},
            hosts={API: pinned_entry(pki, "api", "int-a"),
                   "www.api.test": {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X, PIN_Y]},
                   NX: {"trust": ["root-a.pem"]}},
        )
    ports = {fmt: traffic(p, origins) for fmt, p in made.items()}
    return made, ports


NX = "nx.pinproxy-e2e.invalid"


def event_line(proxy, scenario: str, port: int | None):
    event = {"tunnel-closed": "tunnel-closed", "reload": "reload"}.get(scenario, "connection")
    if port is None:
        return proxy.wait_for_log(lambda l: l.get("event") == event, what=f"event={event}")
    return proxy.wait_for_log(lambda l: l.get("event") == event and l.get("client") == f"127.0.0.1:{port}",
                              what=f"event={event} client=127.0.0.1:{port}")


def test_every_stderr_line_is_a_json_object(pair):
    made, _ports = pair
    p = made["json"]
    raw = [l for l in p.raw_lines() if l.strip()]
    assert raw, "the json daemon logged nothing"
    for l in raw:
        try:
            obj = json.loads(l)
        except ValueError as e:
            raise AssertionError(f"not JSON: {l!r} ({e})") from None
        assert isinstance(obj, dict), l
        assert "event" in obj, l


TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")
# The order lines print their fields in (`AccessLog.Field`): time, level and event first, then the rest.
FIELD_ORDER = ["time", "level", "event", "client", "host", "port", "entry", "outcome", "reason", "status",
               "reopen_outcome", "reopen_reason", "alpn", "detail", "chain", "presented_chain", "verified_chain",
               "verified_pins", "bytes_up", "bytes_down", "duration", "address", "config", "error", "entries", "warning"]
# logfmt's `chain` is JSON's presented_chain and verified_chain.
CERTIFICATE_KEYS = {"logfmt": {"chain"}, "json": {"presented_chain", "verified_chain"}}


@pytest.mark.parametrize("fmt", ["logfmt", "json"])
def test_every_line_starts_with_a_utc_millisecond_time_and_keeps_the_field_order(pair, fmt):
    made, _ports = pair
    now = dt.datetime.now(dt.timezone.utc)
    lines = [l for l in made[fmt].raw_lines() if l.strip()]
    assert lines, f"the {fmt} daemon logged nothing"
    for raw in lines:
        fields = list(json.loads(raw)) if fmt == "json" else list(parse_logfmt(raw))
        assert fields[:3] == ["time", "level", "event"], raw
        known = [f for f in fields if f in FIELD_ORDER]
        assert known == sorted(known, key=FIELD_ORDER.index), raw
        time = json.loads(raw)["time"] if fmt == "json" else parse_logfmt(raw)["time"]
        assert TIMESTAMP.fullmatch(time), raw
        logged = dt.datetime.strptime(time, "%Y-%m-%dT%H:%M:%S.%f%z")
        assert abs((now - logged).total_seconds()) < 600, (time, now)


@pytest.mark.parametrize("scenario", ["allowed", "tunnel-closed", "refused", "bad-request", "reload"])
def test_same_keys_as_logfmt(pair, scenario):
    made, ports = pair
    lines = {fmt: event_line(p, scenario, ports[fmt].get(scenario)) for fmt, p in made.items()}
    assert lines["json"].is_json and not lines["logfmt"].is_json
    # A field logfmt writes as `-` (no value) is left out of JSON.
    keys = {fmt: {k for k, v in line.items() if v != "-"} - CERTIFICATE_KEYS[fmt] for fmt, line in lines.items()}
    assert ("chain" in lines["logfmt"]) == ("presented_chain" in lines["json"]), (lines["logfmt"].raw, lines["json"].raw)
    assert keys["json"] == keys["logfmt"], (
        f"keys differ:\nlogfmt: {sorted(lines['logfmt'])}\njson:   {sorted(lines['json'])}\n"
        f"{lines['logfmt'].raw}\n{lines['json'].raw}")
    for key in ("event", "outcome", "reason", "status", "host", "entry"):
        if key in lines["logfmt"]:
            assert lines["json"][key] == lines["logfmt"][key], (key, lines["logfmt"].raw, lines["json"].raw)


def test_json_values(pair, pki):
    made, ports = pair
    p = made["json"]
    refused = event_line(p, "refused", ports["json"]["refused"])
    assert refused["outcome"] == "refused" and refused["reason"] == "pin-mismatch", refused.raw
    obj = json.loads(refused.raw)
    assert "chain" not in obj, refused.raw
    presented = [(c["subject"], c["spki"]) for c in obj["presented_chain"]]
    assert presented == [("CN=api.test,O=pinproxy tests", pki.spki("api")),
                         ("CN=pinproxy test intermediate A,O=pinproxy tests", pki.spki("int-a"))], refused.raw
    # The path OpenSSL verified ends at the anchor, root-a, which the server did not send.
    path = [pki.spki(stem) for stem in ("api", "int-a", "root-a")]
    assert [c["spki"] for c in obj["verified_chain"]] == path and obj["verified_pins"] == path, refused.raw
    assert obj["verified_chain"][2]["subject"] == "CN=pinproxy test root A,O=pinproxy tests", refused.raw
    logfmt = event_line(made["logfmt"], "refused", ports["logfmt"]["refused"])
    assert logfmt["verified_pins"] == ",".join(path), logfmt.raw
    closed = event_line(p, "tunnel-closed", ports["json"]["tunnel-closed"])
    obj = json.loads(closed.raw)
    for key in ("bytes_up", "bytes_down", "port"):
        assert type(obj[key]) is int and obj[key] > 0, closed.raw
    assert type(obj["duration"]) is float and obj["duration"] >= 0, closed.raw
    assert type(json.loads(refused.raw)["status"]) is int, refused.raw


def test_every_line_stays_one_event_after_dns_failure(pair, origins):
    """A failed lookup (the resolver's own complaints included) still yields only event lines:
    JSON objects from the json daemon, logfmt with an event key from the logfmt one."""
    why = dns_isolation()
    if why is not None:
        pytest.fail(f"refusing to resolve {NX} through the machine's resolver: {why}", pytrace=False)
    made, _ports = pair
    for p in made.values():
        expect_refusal(p, NX, origins.api.port, "dns-failure")
    for l in made["json"].raw_lines():
        if l.strip():
            try:
                obj = json.loads(l)
            except ValueError:
                raise AssertionError(f"json daemon wrote a non-JSON line: {l!r}") from None
            assert isinstance(obj, dict) and "event" in obj, l
    for l in made["logfmt"].raw_lines():
        if l.strip():
            assert "event" in parse_logfmt(l) and "=" in l, f"logfmt daemon wrote a non-event line: {l!r}"
