"""`Proxy-Status` (RFC 9209) on every refusal answered over HTTP.

Every refusal of the suite is checked through `expect_refusal` (`check_proxy_status` in the
harness: one RFC 8941 item, parsed with http_sfv, naming the reason's error type). Here: what
curl -v shows on a CONNECT refusal and inside TLS (`refusal = "in-tls"`), a DNS lookup that
times out (`dns_timeout`, not `dns_error`), a certificate subject full of quotes, backslashes,
controls and non-ASCII that must not break the field, and no Proxy-Status on a report-only 200.
"""

from __future__ import annotations

import re
import socket

import pytest

import origin as originlib
from proxy_harness import (
    API,
    PIN_X,
    PIN_Y,
    check_proxy_status,
    connect,
    curl,  # noqa: F401 (fixture)
    dns_isolation,
    make_proxy,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    run_curl,
)

MISMATCH = {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X, PIN_Y]}


def curl_header(stderr: str, name: str) -> list[str]:
    """The values of the response header NAME in curl -v's trace (`< Name: value`)."""
    return [m.group(1) for m in re.finditer(rf"^< {name}: (.*?)\r?$", stderr, re.M | re.I)]


def test_curl_shows_proxy_status_on_a_connect_refusal(make_proxy, origins, curl):
    p = make_proxy(proxy={"allow_ports": [origins.api.port]}, hosts={API: MISMATCH})
    r = run_curl(curl, p, f"https://{API}:{origins.api.port}/small", "-v")
    assert r.connect_code == 403, r
    [value] = curl_header(r.stderr, "Proxy-Status")
    details = check_proxy_status(value, "pin-mismatch")
    assert "none of the 2 public-key pin(s)" in details, value


def test_curl_shows_proxy_status_inside_tls(make_proxy, origins, curl):
    p = make_proxy(proxy={"allow_ports": [origins.api.port, origins.closed.port], "refusal": "in-tls"},
                   hosts={API: MISMATCH})
    r = run_curl(curl, p, f"https://{API}:{origins.api.port}/small", "-v")
    assert (r.connect_code, r.http_code) == (200, 403), r
    [value] = curl_header(r.stderr, "Proxy-Status")
    check_proxy_status(value, "pin-mismatch")
    r = run_curl(curl, p, f"https://{API}:{origins.closed.port}/", "-v")
    assert (r.connect_code, r.http_code) == (200, 502), r
    [value] = curl_header(r.stderr, "Proxy-Status")
    check_proxy_status(value, "upstream-unreachable")


def test_no_proxy_status_on_a_report_only_200(make_proxy, origins):
    p = make_proxy(proxy={"allow_ports": [origins.api.port]}, hosts={API: {**MISMATCH, "enforce": False}})
    c = connect(p.port, API, origins.api.port)
    c.sock.close()
    head = c.answer
    assert head.status == 200, head
    assert head.headers.get("pinproxy-verdict") == "would-refuse pin-mismatch", head
    assert "proxy-status" not in head.headers, head


def test_a_dns_timeout_is_dns_timeout(make_proxy, origins, tmp_path):
    """A resolver that never answers: the lookup runs into dns_timeout (1 s), well before the
    resolver's own 30 s timeout would turn it into a failure."""
    why = dns_isolation()
    if why is not None:
        pytest.fail(f"cannot give the daemon its own resolv.conf: {why}", pytrace=False)
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    try:
        resolv = tmp_path / "resolv.conf"
        resolv.write_text(f"nameserver 127.0.0.1:{silent.getsockname()[1]}\noptions timeout:30 attempts:1\n")
        name = "slow.pinproxy-e2e.invalid"
        p = make_proxy(proxy={"allow_ports": [origins.api.port], "dns_timeout": 1}, hosts={name: {"trust": ["root-a.pem"]}},
                       resolv_conf=resolv)
        c = connect(p.port, name, origins.api.port)
        assert c.answer.status == 502 and c.answer.refusal == "dns-failure", c.answer
        details = check_proxy_status(c.answer.headers.get("proxy-status"), "dns-failure", error="dns_timeout")
        assert "no DNS answer" in details, details
        silent.settimeout(5)
        assert silent.recv(512), "the daemon never asked the silent resolver"
    finally:
        silent.close()


def test_a_hostile_certificate_subject_keeps_the_field_valid(make_proxy, pki, tmp_path):
    import pki as pkilib

    forged = 'ev"il\\ \x1b[31m caf\u00e9 \u202eX\u2028' + "x" * 38
    leaf = pkilib.make_leaf(forged, None, san_dns=[API])
    leaf.write(tmp_path, "forged", leaf)
    server = originlib.TLSOrigin(tmp_path / "forged-chain.pem", tmp_path / "forged.key", name="forged")
    try:
        p = make_proxy(proxy={"allow_ports": [server.port]}, hosts={API: {"trust": ["root-a.pem"]}})
        c = connect(p.port, API, server.port)
        assert c.answer.refusal == "untrusted-chain", c.answer
        value = c.answer.headers["proxy-status"]
        details = check_proxy_status(value, "untrusted-chain")
        # OpenSSL writes the subject RFC 4514-escaped; the field escapes that again.
        assert details.startswith("untrusted-chain: self-signed certificate (depth 0: CN=ev\\\"il\\\\ "), value
        assert details.endswith("caf? ?X?" + "x" * 38 + ",O=pinproxy tests)"), value
        assert all(0x20 <= b < 0x7F for b in value.encode("latin-1")), value
    finally:
        server.close()
