"""Self-checks of the proxy-test harness itself (no pinproxy binary needed):
the origins serve what they claim when fetched directly, the logfmt parser, the
DNS isolation the daemons run under."""

from __future__ import annotations

import hashlib
import json
import socket
import ssl
import subprocess

import pytest

import origin as originlib
from proxy_harness import (
    _ISOLATE,
    TIMEOUT,
    _resolv_conf_file,
    dns_isolation,
    origins,  # noqa: F401 (fixture)
    parse_log_line,
    parse_logfmt,
)


def direct_context(pki) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(pki.path("root-a.pem")))


def test_origin_small_and_big_direct(origins, pki):
    o = origins.api
    assert originlib.fetch_direct(o, "/small", pki.path("root-a.pem"), "api.test") == originlib.SMALL_BODY
    big = originlib.fetch_direct(o, "/big", pki.path("root-a.pem"), "api.test")
    assert len(big) == originlib.BIG_SIZE
    assert hashlib.sha256(big).hexdigest() == originlib.big_sha256()
    assert "api.test" in o.sni


def test_origin_echo_direct(origins, pki):
    o = origins.api
    body = originlib.fetch_direct(o, "/echo?x=1", pki.path("root-a.pem"), "www.api.test")
    doc = json.loads(body)
    assert doc["method"] == "GET" and doc["path"] == "/echo?x=1" and doc["sni"] == "www.api.test"


def test_origin_ip_chain_on_v4(origins, pki):
    o = origins.ip
    assert originlib.fetch_direct(o, "/small", pki.path("root-a.pem"), "127.0.0.1") == originlib.SMALL_BODY


@pytest.mark.parametrize("stem,error", [
    ("expired", "expired"),
    ("untrusted", "unable to get local issuer"),
    ("other", "mismatch"),
])
def test_bad_origins_fail_direct_verification(origins, pki, stem, error):
    o = {"expired": origins.expired, "untrusted": origins.untrusted, "other": origins.other}[stem]
    with pytest.raises(ssl.SSLCertVerificationError) as e:
        originlib.fetch_direct(o, "/small", pki.path("root-a.pem"), "api.test")
    assert error in str(e.value).lower()


def test_tls12_origin_refuses_tls13_only_client(origins, pki):
    ctx = direct_context(pki)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    with socket.create_connection(("127.0.0.1", origins.tls12.port), timeout=TIMEOUT) as raw:
        with pytest.raises(ssl.SSLError):
            ctx.wrap_socket(raw, server_hostname="api.test")


def test_silent_origin_never_answers(origins):
    with socket.create_connection(("127.0.0.1", origins.silent.port), timeout=TIMEOUT) as s:
        s.sendall(b"\x16\x03\x01\x00\x00")
        s.settimeout(0.3)
        with pytest.raises(socket.timeout):
            s.recv(1)  # waiting for nothing is the point here: a bounded read that must time out


def test_closed_port_refuses(origins):
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", origins.closed.port), timeout=TIMEOUT)


def test_plain_origin_answers_cleartext(origins):
    with socket.create_connection(("127.0.0.1", origins.plain.port), timeout=TIMEOUT) as s:
        s.sendall(b"GET /small HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.") and data.endswith(originlib.SMALL_BODY)


def test_logfmt_parser():
    line = 'ts=1 event=connection client=127.0.0.1:5 entry=hosts."api.test" chain="CN=a b, sha256/x=; \\"q\\"" empty= flag'
    d = parse_logfmt(line)
    assert d == {
        "ts": "1",
        "event": "connection",
        "client": "127.0.0.1:5",
        "entry": 'hosts."api.test"',
        "chain": 'CN=a b, sha256/x=; "q"',
        "empty": "",
        "flag": "",
    }
    assert parse_logfmt('entry="hosts.\\"api.test\\"" a=b')["entry"] == 'hosts."api.test"'
    assert parse_log_line("/x/pinproxy.toml:3: warning: one pin") is None
    j = parse_log_line('{"event":"connection","port":443,"ok":true}')
    assert j == {"event": "connection", "port": "443", "ok": "true"} and j.is_json


def test_dns_isolation_probe():
    """The daemons resolve through a loopback-only resolv.conf (so dns-failure sends no packet)."""
    why = dns_isolation()
    if why is not None:
        pytest.fail(f"cannot isolate the daemons' DNS: {why}", pytrace=False)
    p = subprocess.run(
        ["unshare", "--mount", "sh", "-c", _ISOLATE, "sh", str(_resolv_conf_file()),
         "getent", "hosts", "nx.pinproxy-e2e.invalid"],
        capture_output=True, text=True, timeout=TIMEOUT,
    )
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)  # 2: not found
