"""`refusal = "in-tls"`: for clients that print only a CONNECT status (curl, git), a refusal
answered inside the client's TLS.

The CONNECT gets 200, the client's TLS completes with a leaf the local CA minted for the
host, and the client's request gets an HTTP 403/502 (with the reason in its status line and
`Pinproxy-Refusal`) whose text body explains the refusal: what was presented, which pins
were expected, how to update the policy. Not a byte of the request reaches the refused
origin. The default stays the CONNECT refusal, and requests that name no host (bad-request)
are always refused on the CONNECT.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import uuid

import pytest

from proxy_harness import (
    API,
    PIN_X,
    PIN_Y,
    TIMEOUT,
    Tunnel,
    connect,
    curl,  # noqa: F401 (fixture)
    make_proxy,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    raw_exchange,
    read_to_eof,
    run_curl,
)


@pytest.fixture
def proxy(make_proxy, origins, pki):
    return make_proxy(
        proxy={"allow_ports": [origins.api.port, origins.closed.port], "refusal": "in-tls"},
        hosts={API: {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X, PIN_Y]}},
    )


def get_inside(proxy, host, port, path, method="GET"):
    """CONNECT (must be 200), TLS trusting the pinproxy CA, one request: (response, body, tunnel)."""
    t = Tunnel(proxy, host, port)
    t.conn.request(method, path, headers={"Host": f"{host}:{port}"})
    r = t.conn.getresponse()
    body = r.read()
    return r, body, t


def test_pin_mismatch_is_a_403_inside_tls_that_explains(proxy, origins, pki):
    path = f"/small?{uuid.uuid4()}"
    r, body, t = get_inside(proxy, API, origins.api.port, path)
    t.close()
    text = body.decode()
    assert r.status == 403 and r.reason == f"pinproxy: pin-mismatch for {API}", (r.status, r.reason)
    assert r.getheader("Pinproxy-Refusal") == "pin-mismatch"
    assert r.getheader("Content-Type") == "text/plain; charset=utf-8"
    assert r.getheader("Connection") == "close"
    assert f"pinproxy refused {API}:{origins.api.port}: pin-mismatch" in text, text
    assert pki.spki("api") in text and pki.spki("int-a") in text, text  # what was presented
    assert PIN_X in text and PIN_Y in text, text  # what was expected
    assert "add its public-key pin" in text and "pinproxy check --config" in text, text  # how to update
    assert path not in origins.api.paths, "the refused origin received the request"
    line = proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("reason") == "pin-mismatch")
    assert line.get("outcome") == "refused" and line.get("status") == "403", line.raw
    proxy.wait_for_log(lambda l: l.get("event") == "refusal-in-tls" and "page was sent" in l.get("detail", ""))


def test_curl_prints_the_reason(proxy, origins, curl):
    res = run_curl(curl, proxy, f"https://{API}:{origins.api.port}/small")
    assert res.exit == 0 and res.connect_code == 200 and res.http_code == 403, res
    assert b"pin-mismatch" in res.body, res


def test_head_gets_no_body(proxy, origins):
    r, body, t = get_inside(proxy, API, origins.api.port, "/small", method="HEAD")
    t.close()
    assert r.status == 403 and body == b"", (r.status, body)
    assert int(r.getheader("Content-Length")) > 0


def test_host_denied_and_unreachable_inside_tls(proxy, origins):
    r, body, t = get_inside(proxy, "denied.test", origins.api.port, "/")
    t.close()
    assert r.status == 403 and r.getheader("Pinproxy-Refusal") == "host-denied", (r.status, body)
    assert b'add a [hosts."denied.test"] entry' in body, body
    # An upstream that cannot be reached: a 502 inside TLS.
    p2 = proxy
    p2.resolve["closed.test"] = "127.0.0.1"
    p2.hosts["closed.test"] = {"trust": ["root-a.pem"]}
    p2.write_config()
    assert p2.reload().get("outcome") == "ok"
    r, body, t = get_inside(p2, "closed.test", origins.closed.port, "/")
    t.close()
    assert r.status == 502 and r.getheader("Pinproxy-Refusal") == "upstream-unreachable", (r.status, body)


def test_bad_request_is_still_refused_on_the_connect(proxy):
    ex = raw_exchange(proxy.port, b"CONNECT nonsense HTTP/1.1\r\n\r\n")
    assert ex.answer.status == 400 and ex.answer.refusal == "bad-request", str(ex.answer)


def test_client_that_does_not_trust_the_ca_fails_its_handshake(proxy, origins):
    c = connect(proxy.port, API, origins.api.port)
    assert c.answer.status == 200
    ctx = ssl.create_default_context()  # the system store: no pinproxy CA
    with pytest.raises(ssl.SSLError):
        ctx.wrap_socket(c.sock, server_hostname=API)
    c.close()
    proxy.wait_for_log(lambda l: l.get("event") == "client-handshake-failed", what="event=client-handshake-failed")


def test_client_silent_after_the_handshake_is_closed(make_proxy, origins):
    # The timeout covers the handshake too: 3 s leaves room for a sanitizer build's.
    p = make_proxy(proxy={"allow_ports": [origins.api.port], "refusal": "in-tls", "handshake_timeout": 3},
                   hosts={API: {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X, PIN_Y]}})
    c = connect(p.port, API, origins.api.port)
    tls = p.client_context().wrap_socket(c.sock, server_hostname=API)
    data, how = read_to_eof(tls, TIMEOUT)  # no request sent: the page never comes, the connection ends
    assert data == b"", data
    tls.close()
    p.wait_for_log(lambda l: l.get("event") == "refusal-in-tls" and "no TLS handshake or request" in l.get("detail", ""))


def test_default_is_the_connect_refusal(make_proxy, origins):
    p = make_proxy(proxy={"allow_ports": [origins.api.port]},
                   hosts={API: {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X, PIN_Y]}})
    c = connect(p.port, API, origins.api.port)
    assert c.answer.status == 403 and c.answer.refusal == "pin-mismatch", str(c.answer)


def test_refusal_value_is_checked(ws):
    cfg = ws.config('[proxy]\nrefusal = "inside"\n')
    res = ws.check(cfg)
    assert res.code == 1 and "proxy.refusal" in res.err and '"in-tls"' in res.err, res


def test_certificate_text_cannot_restyle_the_page(make_proxy, pki, tmp_path):
    """A server's certificate subject is on the page: control, format (bidi) and separator
    characters in it are replaced, so it can neither send terminal escapes nor disguise text."""
    import origin as originlib
    import pki as pkilib

    forged = "evil\x1b[31mred\u2028line\u0085nel\u202eX\nY"
    leaf = pkilib.make_leaf(forged, None, san_dns=[API])
    leaf.write(tmp_path, "forged", leaf)
    server = originlib.TLSOrigin(tmp_path / "forged-chain.pem", tmp_path / "forged.key", name="forged")
    try:
        p = make_proxy(proxy={"allow_ports": [server.port], "refusal": "in-tls"},
                       hosts={API: {"trust": ["root-a.pem"]}})
        r, body, t = get_inside(p, API, server.port, "/")
        t.close()
        text = body.decode("utf-8")
        assert r.status == 403 and r.getheader("Pinproxy-Refusal") == "untrusted-chain", text
        assert "red?line?nel?X" in text, text  # (OpenSSL escapes ESC and newline itself)
        for character in ("\x1b", "\u2028", "\u0085", "\u202e"):
            assert character not in text, f"U+{ord(character):04X} reached the page"
    finally:
        server.close()
