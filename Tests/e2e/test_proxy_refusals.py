"""`pinproxy run`: refused connections.

Every refusal reason the daemon decides around a CONNECT, each checked for its exact
status, the `Pinproxy-Refusal: <reason>` header, a body that names the reason, the
connection being closed, and the log line (`event=connection outcome=refused
reason=… status=… entry=…`, and for certificate refusals a `chain` with the presented
certificates' public-key pins).  Real clients too: curl reports the CONNECT status,
urllib raises.  A client whose SNI differs from the CONNECT host is refused.

One daemon serves most of the module (handshake_timeout = 1 for upstream-timeout);
block_private_destinations = true has its own, and so does revocation (a CRL listing
the `revoked` leaf; `ocsp-staple` against an origin that cannot staple).

DNS: the daemons run with a loopback-only resolv.conf (see proxy_harness), so the
dns-failure case sends no query off the machine.
"""

from __future__ import annotations

import ssl
import time
import urllib.error
import uuid

import pytest

import origin as originlib
from proxy_harness import (
    ACCEPT_HTTP10_CONNECT,
    API,
    STDLIB_CONNECT_VERSION,
    STDLIB_NOTE,
    TIMEOUT,
    connect,
    curl,  # noqa: F401 (fixture)
    dns_isolation,
    expect_refusal,
    https_get,
    ipv6_loopback_available,
    make_proxy,  # noqa: F401 (fixture)
    module_proxies,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    pinned_entry,
    read_to_eof,
    run_curl,
    urllib_get,
)

NX = "nx.pinproxy-e2e.invalid"  # in no [resolve]: real resolution, which must fail
V6 = ipv6_loopback_available()


@pytest.fixture(scope="module")
def proxy(module_proxies, origins, pki):
    o = origins
    return module_proxies(
        proxy={
            "allow_ports": [o.api.port, o.expired.port, o.notyet.port, o.untrusted.port, o.other.port, o.tls12.port,
                            o.silent.port, o.plain.port, o.closed.port],
            "handshake_timeout": 1,
            "connect_timeout": 2,
            "dns_timeout": 2,
        },
        resolve={API: "127.0.0.1", "www.api.test": "127.0.0.1", "tls13.test": "127.0.0.1",
                 "denied.test": "127.0.0.1", "unlisted.test": "127.0.0.1", "ports.test": "127.0.0.1"},
        default={"action": "deny"},
        hosts={
            API: pinned_entry(pki, "api", "int-a"),
            # Same chain, but pins that match none of its certificates.
            "www.api.test": pinned_entry(pki, "api-newkey", "root-b"),
            "tls13.test": {"trust": ["root-a.pem"], "min_tls": "1.3"},
            "denied.test": {"action": "deny"},
            "ports.test": {"trust": ["root-a.pem"], "ports": [o.closed.port]},
            NX: {"trust": ["root-a.pem"]},
        },
    )


def ent(name: str) -> str:
    return "default" if name == "default" else f'hosts."{name}"'


# (id, reason, CONNECT host, origin attribute or port, log entry, presented chain stems)
CASES = [
    ("pin-mismatch", "pin-mismatch", "www.api.test", "api", "www.api.test", ["api", "int-a"]),
    ("expired", "certificate-expired", API, "expired", API, ["expired", "int-a"]),
    ("not-yet-valid", "certificate-not-yet-valid", API, "notyet", API, ["notyet", "int-a"]),
    ("untrusted-root", "untrusted-chain", API, "untrusted", API, ["untrusted", "int-b"]),
    ("wrong-host", "hostname-mismatch", API, "other", API, ["other", "int-a"]),
    ("denied-host", "host-denied", "denied.test", "api", "denied.test", None),
    ("default-deny", "host-denied", "unlisted.test", "api", "default", None),
    ("port-not-in-allow-ports", "port-denied", API, 1, API, None),
    ("port-not-in-entry-ports", "port-denied", "ports.test", "api", "ports.test", None),
    ("tls-version", "tls-version", "tls13.test", "tls12", "tls13.test", None),
    ("plain-http-upstream", "handshake-failed", API, "plain", API, None),
    ("closed-port", "upstream-unreachable", API, "closed", API, None),
    ("silent-upstream", "upstream-timeout", API, "silent", API, None),
]


def target_port(origins, where) -> int:
    return where if isinstance(where, int) else getattr(origins, where).port


@pytest.mark.parametrize("reason,host,where,entry,chain", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refusal(proxy, origins, pki, reason, host, where, entry, chain):
    port = target_port(origins, where)
    ans, line = expect_refusal(proxy, host, port, reason)
    assert line.get("entry") == ent(entry), line.raw
    if chain:
        presented = line.get("chain", "")
        for stem in chain:
            assert pki.spki(stem) in presented, f"chain field lacks the {stem} pin {pki.spki(stem)}:\n{line.raw}"
        leaf_name = "other.test" if chain[0] == "other" else "api.test"
        assert leaf_name in presented, f"chain field lacks the leaf subject:\n{line.raw}"


def test_upstream_timeout_is_bounded_by_handshake_timeout(proxy, origins):
    """handshake_timeout = 1: the 504 comes well before the client would give up."""
    t0 = time.monotonic()
    expect_refusal(proxy, API, origins.silent.port, "upstream-timeout")
    assert time.monotonic() - t0 < 1 + 5


def test_dns_failure(proxy, origins):
    why = dns_isolation()
    if why is not None:
        pytest.fail(f"refusing to resolve {NX} through the machine's resolver: {why}", pytrace=False)
    ans, line = expect_refusal(proxy, NX, origins.api.port, "dns-failure")
    assert line.get("entry") == ent(NX), line.raw


# ------------------------------------------------------------ real clients


@pytest.mark.parametrize("host,where,status", [
    ("www.api.test", "api", 403),  # pin-mismatch
    (API, "closed", 502),  # upstream-unreachable
    (API, "silent", 504),  # upstream-timeout
])
def test_curl_reports_connect_status(proxy, origins, curl, host, where, status):
    r = run_curl(curl, proxy, f"https://{host}:{target_port(origins, where)}/small")
    assert r.exit != 0, r
    assert r.connect_code == status, r
    assert f"CONNECT tunnel failed, response {status}" in r.stderr, r


def test_urllib_raises_on_refusal(proxy, origins):
    def call():
        with pytest.raises(urllib.error.URLError) as e:
            urllib_get(proxy, f"https://www.api.test:{origins.api.port}/small")
        return e.value

    if STDLIB_CONNECT_VERSION == "HTTP/1.0" and not ACCEPT_HTTP10_CONNECT:
        assert "400" in str(call())
        pytest.xfail(STDLIB_NOTE)
    err = call()
    assert "403" in str(err), err


# ------------------------------------------------------- hostile certificate text


def test_refusal_body_is_printable_ascii_and_bounded(make_proxy, tmp_path):
    """The detail of a refusal quotes the server's certificate subject: control characters,
    non-ASCII text, HTML and sheer length in it reach neither the body nor the headers as such."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    import pki as pkilib

    # RFC 2253 lists the last attribute first: the CN and O lead the detail, the units run long.
    hostile = [x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, f"unit {i:02} " + "x" * 50) for i in range(60)] + [
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "M\u00fcller \u4e2d\u6587 <script>alert(1)</script>"),
        x509.NameAttribute(NameOID.COMMON_NAME, "evil\x1b[31mred\u2028line\u0085nel\u202eX\nY"),
    ]
    leaf = pkilib.make_leaf(None, None, subject=x509.Name(hostile), san_dns=[API])
    leaf.write(tmp_path, "hostile", leaf)
    server = originlib.TLSOrigin(tmp_path / "hostile-chain.pem", tmp_path / "hostile.key", name="hostile")
    try:
        p = make_proxy(proxy={"allow_ports": [server.port]}, resolve={API: "127.0.0.1"},
                       hosts={API: {"trust": ["root-a.pem"]}})
        c = connect(p.port, API, server.port)
        ans = c.answer
        assert ans.status == 403 and ans.refusal == "untrusted-chain", str(ans)
        # The detail names the subject (the log line has it whole) ...
        assert "script\\>alert(1)" in ans.text and "unit 59" in ans.text, str(ans)  # (OpenSSL escapes < and >)
        # ... but every byte of the answer is printable ASCII, CRLF aside, and the body is cut.
        outside = sorted({b for b in ans.raw.replace(b"\r\n", b"").replace(b"\n", b"") if not 0x20 <= b <= 0x7E})
        assert outside == [], f"bytes outside printable ASCII: {outside}\n{ans.raw[:600]!r}"
        assert len(ans.body) <= 2_200 and ans.body.endswith(b"...\n"), f"{len(ans.body)} bytes: {ans.body[-200:]!r}"
        assert b"red?line?nel?X" in ans.body and b"O=M?ller ?? " in ans.body, ans.body[:600]
        assert len(ans.status_line) <= 160, ans.status_line
        assert ans.headers.get("content-type") == "text/plain; charset=utf-8", str(ans)
        assert ans.headers.get("x-content-type-options") == "nosniff", str(ans)
        line = p.connection_log(c.client_port)
        assert "unit 00" in line.get("detail", "") and "unit 00" not in ans.text, line.raw
        p.assert_alive("after refusing a hostile subject")
    finally:
        server.close()


# --------------------------------------------------------------------- SNI


@pytest.mark.parametrize("sni", ["www.api.test", "other.test"])
def test_sni_different_from_connect_host_is_refused(proxy, origins, sni):
    """CONNECT api.test, then a ClientHello naming another host: the handshake fails or the
    connection closes, and no request reaches the origin.  The client trusts the pinproxy CA
    but skips its own name check, so only pinproxy can stop this."""
    marker = f"/echo/sni-mismatch-{uuid.uuid4().hex}"
    c = connect(proxy.port, API, origins.api.port)
    assert c.answer.status == 200, c.answer
    ctx = proxy.client_context()
    ctx.check_hostname = False
    try:
        try:
            tls = ctx.wrap_socket(c.sock, server_hostname=sni)
        except (ssl.SSLError, OSError):
            tls = None  # refused during the handshake
        if tls is not None:
            # TLS 1.3 lets the client finish before the server has judged it: what matters is that
            # nothing is relayed.
            try:
                tls.sendall(f"GET {marker} HTTP/1.1\r\nHost: {sni}\r\n\r\n".encode())
                data, _how = read_to_eof(tls, TIMEOUT)
            except (ssl.SSLError, OSError):
                data = b""
            assert not data.startswith(b"HTTP/"), f"SNI {sni} under CONNECT {API} was relayed: {data[:200]!r}"
    finally:
        c.close()
    assert marker not in origins.api.paths, "the request reached the origin"
    proxy.assert_alive("after an SNI mismatch")


# --------------------------------------------------- private destinations


@pytest.fixture(scope="module")
def private_proxy(module_proxies, origins, pki):
    ports = [origins.api.port, origins.ip.port] + ([origins.ip6.port] if V6 else [])
    return module_proxies(
        name="private",
        proxy={"allow_ports": ports, "block_private_destinations": True},
        resolve={API: "127.0.0.1"},
        default={"action": "verify", "trust": ["root-a.pem"]},
        hosts={API: pinned_entry(pki, "api", "int-a")},
    )


def test_private_destination_by_name(private_proxy, origins):
    ans, line = expect_refusal(private_proxy, API, origins.api.port, "destination-denied")
    assert line.get("entry") == ent(API), line.raw


def test_private_destination_ip_literal(private_proxy, origins):
    expect_refusal(private_proxy, "127.0.0.1", origins.ip.port, "destination-denied")


@pytest.mark.skipif(not V6, reason="no IPv6 loopback on this machine")
def test_private_destination_ipv6_literal(private_proxy, origins):
    expect_refusal(private_proxy, "::1", origins.ip6.port, "destination-denied")


# --------------------------------------------------------------- revocation


@pytest.fixture(scope="module")
def revocation_proxy(module_proxies, origins, pki):
    return module_proxies(
        name="revocation",
        proxy={"allow_ports": [origins.api.port, origins.revoked.port]},
        resolve={API: "127.0.0.1", "www.api.test": "127.0.0.1"},
        hosts={
            API: {"trust": ["root-a.pem"], "revocation": "crl", "crls": ["crl-int-a.pem"]},
            # Python's ssl cannot staple OCSP: no origin here ever staples.
            "www.api.test": {"trust": ["root-a.pem"], "revocation": "ocsp-staple"},
        },
    )


def test_revoked_by_crl(revocation_proxy, origins, pki):
    _ans, line = expect_refusal(revocation_proxy, API, origins.revoked.port, "revoked")
    assert pki.spki("revoked") in line.get("chain", ""), line.raw


def test_crl_checked_leaf_not_listed_is_allowed(revocation_proxy, origins):
    status, body, _der, _port = https_get(revocation_proxy, API, origins.api.port, "/small")
    assert (status, body) == (200, originlib.SMALL_BODY)


def test_no_ocsp_staple_is_revocation_unknown(revocation_proxy, origins):
    expect_refusal(revocation_proxy, "www.api.test", origins.api.port, "revocation-unknown")
