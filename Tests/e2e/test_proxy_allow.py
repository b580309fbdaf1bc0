"""`pinproxy run`: allowed connections.

A pinned host (chain to root-a, public-key pins of api and int-a) is allowed: the
client gets `HTTP/1.1 200 Connection established`, then a TLS session with a leaf
minted for the CONNECT host and signed by the `pinproxy ca` certificate; bodies cross
intact both ways (small, 1 MiB upload, 8 MiB download, compared by SHA-256); IP-literal
CONNECTs work; the log has outcome=allowed with the presented chain, and a
tunnel-closed line with byte counts.  Clients: curl, urllib, http.client, raw sockets.
One daemon serves the whole module.
"""

from __future__ import annotations

import concurrent.futures
import json
import subprocess

import pytest
from cryptography import x509

import origin as originlib
from proxy_harness import (
    API,
    ESTABLISHED,
    Tunnel,
    clean_env,
    connect,
    curl,  # noqa: F401 (fixture)
    https_get,
    ipv6_loopback_available,
    load_cert,
    module_proxies,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    pinned_entry,
    run_curl,
    san_of,
    sha256,
    stdlib,
    stdlib_https_get,
    urllib_get,
)

BIG_SHA = originlib.big_sha256()
V6 = ipv6_loopback_available()


@pytest.fixture(scope="module")
def proxy(module_proxies, origins, pki):
    ports = [origins.api.port, origins.ip.port, origins.tls12.port]
    if V6:
        ports.append(origins.ip6.port)
    return module_proxies(
        proxy={"allow_ports": ports},
        resolve={API: "127.0.0.1", "www.api.test": "127.0.0.1"},
        hosts={
            API: pinned_entry(pki, "api", "int-a"),
            "www.api.test": pinned_entry(pki, "api", "int-a"),
            "127.0.0.1": pinned_entry(pki, "ip", "int-a"),
            "::1": pinned_entry(pki, "ip", "int-a"),
        },
    )


def url(origin, path: str, host: str = API) -> str:
    return f"https://{host}:{origin.port}{path}"


# -------------------------------------------------------------------- bodies


def test_curl_small(proxy, origins, curl):
    r = run_curl(curl, proxy, url(origins.api, "/small"))
    assert r.exit == 0, r
    assert (r.connect_code, r.http_code) == (200, 200), r
    assert r.body == originlib.SMALL_BODY


def test_curl_big_sha256(proxy, origins, curl):
    r = run_curl(curl, proxy, url(origins.api, "/big"))
    assert r.exit == 0 and r.http_code == 200, r
    assert len(r.body) == originlib.BIG_SIZE
    assert sha256(r.body) == BIG_SHA


def test_curl_with_https_proxy_environment(proxy, origins, curl):
    """How clients are meant to use it: HTTPS_PROXY in the environment, no -x."""
    p = subprocess.run(
        [curl, "-sS", "--cacert", str(proxy.ca_path), "--max-time", "60", url(origins.api, "/small")],
        capture_output=True, timeout=90, stdin=subprocess.DEVNULL,
        env=clean_env(HTTPS_PROXY=proxy.url, https_proxy=proxy.url),
    )
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout == originlib.SMALL_BODY


def test_curl_http11_only(proxy, origins, curl):
    r = run_curl(curl, proxy, url(origins.api, "/small"), "--http1.1")
    assert r.exit == 0 and r.http_code == 200, r
    assert r.body == originlib.SMALL_BODY


def test_urllib_small(proxy, origins):
    status, body = stdlib(lambda: urllib_get(proxy, url(origins.api, "/small")))
    assert status == 200 and body == originlib.SMALL_BODY


def test_urllib_big_sha256(proxy, origins):
    status, body = stdlib(lambda: urllib_get(proxy, url(origins.api, "/big"), timeout=60))
    assert status == 200
    assert len(body) == originlib.BIG_SIZE and sha256(body) == BIG_SHA


def test_http_client_set_tunnel(proxy, origins):
    status, body = stdlib(lambda: stdlib_https_get(proxy, API, origins.api.port, "/small"))
    assert status == 200 and body == originlib.SMALL_BODY


def test_tunnel_http_client_small(proxy, origins):
    """http.client over our own CONNECT ... HTTP/1.1 (works on any Python)."""
    status, body, _der, _port = https_get(proxy, API, origins.api.port, "/small")
    assert status == 200 and body == originlib.SMALL_BODY


def test_upload_and_several_requests_over_one_tunnel(proxy, origins):
    """Keep-alive: three requests over one tunnel, one of them a 1 MiB upload echoed by hash."""
    upload = originlib.big_body()[: 1 << 20]
    with Tunnel(proxy, API, origins.api.port) as t:
        assert t.get("/small") == (200, originlib.SMALL_BODY)
        status, body = t.request("POST", "/echo", body=upload, headers={"Content-Type": "application/octet-stream"})
        assert status == 200
        doc = json.loads(body)
        assert doc["body_len"] == len(upload) and doc["body_sha256"] == sha256(upload)
        status, body = t.get("/bytes/300000")
        assert status == 200 and body == originlib.big_body()[:300000]


def test_parallel_clients(proxy, origins):
    """Eight tunnels at once, each fetching 1 MiB intact."""
    want = sha256(originlib.big_body()[: 1 << 20])

    def one(_):
        status, body, _der, _port = https_get(proxy, API, origins.api.port, f"/bytes/{1 << 20}", timeout=60)
        return status, sha256(body)

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(one, range(8)))
    assert results == [(200, want)] * 8


def test_tls12_only_origin_allowed_at_default_min_tls(proxy, origins):
    status, body, _der, _port = https_get(proxy, API, origins.tls12.port, "/small")
    assert status == 200 and body == originlib.SMALL_BODY


# -------------------------------------------------------------- minted leaf


def test_ca_command_prints_path_and_pem(proxy):
    path, pem = proxy.ca()
    assert path.is_file(), path
    on_disk = load_cert(path.read_bytes())
    printed = load_cert(pem)
    assert on_disk == printed, "the PEM printed differs from the file at the printed path"
    bc = printed.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert bc.ca, "the pinproxy CA certificate is not a CA"


@pytest.mark.parametrize("host", [API, "www.api.test"])
def test_minted_leaf_names_connect_host_and_is_signed_by_ca(proxy, origins, pki, host):
    status, body, der, _port = https_get(proxy, host, origins.api.port, "/small")
    assert status == 200 and body == originlib.SMALL_BODY
    leaf = load_cert(der)
    ca = load_cert(proxy.ca()[1])
    dns, ips = san_of(leaf)
    assert (dns, ips) == ([host], []), f"minted leaf SAN: DNS {dns}, IP {ips}; expected exactly {host}"
    assert leaf.issuer == ca.subject
    leaf.verify_directly_issued_by(ca)  # raises if the signature is not the CA's
    assert leaf.public_key() != pki.certs["api"].cert.public_key(), "the origin's own leaf reached the client"


def test_raw_connect_answer_is_exactly_established(proxy, origins):
    c = connect(proxy.port, API, origins.api.port)
    try:
        assert c.answer.status_line == ESTABLISHED, c.answer
    finally:
        c.close()


def test_ip_literal_v4(proxy, origins, curl):
    status, body, der, _port = https_get(proxy, "127.0.0.1", origins.ip.port, "/small")
    assert status == 200 and body == originlib.SMALL_BODY
    dns, ips = san_of(load_cert(der))
    assert ips == ["127.0.0.1"] and dns == [], (dns, ips)
    r = run_curl(curl, proxy, f"https://127.0.0.1:{origins.ip.port}/small")
    assert r.exit == 0 and r.http_code == 200 and r.body == originlib.SMALL_BODY, r


@pytest.mark.skipif(not V6, reason="no IPv6 loopback on this machine")
def test_ip_literal_v6(proxy, origins, curl):
    status, body, der, _port = https_get(proxy, "::1", origins.ip6.port, "/small")
    assert status == 200 and body == originlib.SMALL_BODY
    dns, ips = san_of(load_cert(der))
    assert ips == ["::1"] and dns == [], (dns, ips)
    r = run_curl(curl, proxy, f"https://[::1]:{origins.ip6.port}/small")
    assert r.exit == 0 and r.http_code == 200 and r.body == originlib.SMALL_BODY, r


# ---------------------------------------------------------------------- log


def test_log_allowed_and_tunnel_closed(proxy, origins, pki):
    n = 300_000
    with Tunnel(proxy, API, origins.api.port) as t:
        assert t.get(f"/bytes/{n}") == (200, originlib.big_body()[:n])
        cport = t.client_port
    line = proxy.connection_log(cport)
    assert line.get("outcome") == "allowed", line.raw
    assert line.get("host") == API and line.get("port") == str(origins.api.port), line.raw
    assert line.get("entry") == 'hosts."api.test"', line.raw
    assert line.get("status") == "200", line.raw
    chain = line.get("chain", "")
    for stem in ("api", "int-a"):
        assert pki.spki(stem) in chain, f"chain lacks the {stem} pin: {line.raw}"
    assert "api.test" in chain and "intermediate A" in chain, f"chain lacks the subjects: {line.raw}"

    closed = proxy.wait_for_log(
        lambda l: l.get("event") == "tunnel-closed" and l.get("client") == f"127.0.0.1:{cport}",
        what=f"event=tunnel-closed client=127.0.0.1:{cport}",
    )
    assert int(closed["bytes_down"]) >= n, closed.raw
    assert int(closed["bytes_up"]) > 0, closed.raw
    assert float(closed["duration"].rstrip("s")) >= 0, closed.raw


def test_log_counts_every_byte_each_way(proxy, origins):
    """bytes_up and bytes_down are exactly the application data the tunnel carried, also when
    one relay pass moves many TLS records: a 100 KiB upload and a 300 KB download, pipelined on
    one tunnel, the second with `Connection: close`, read until the proxy's close_notify."""
    upload = bytes(range(256)) * 400
    host = f"{API}:{origins.api.port}"
    sent = (f"POST /echo HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(upload)}\r\n\r\n".encode() + upload
            + f"GET /bytes/300000 HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    with Tunnel(proxy, API, origins.api.port) as t:
        t.tls.sendall(sent)
        received = bytearray()
        while chunk := t.tls.recv(65536):
            received += chunk
        cport = t.client_port
    assert received.endswith(originlib.big_body()[:300_000]), received[:300]
    assert b'"body_len": 102400' in received or b'"body_len":102400' in received, received[:600]
    closed = proxy.wait_for_log(
        lambda l: l.get("event") == "tunnel-closed" and l.get("client") == f"127.0.0.1:{cport}",
        what=f"event=tunnel-closed client=127.0.0.1:{cport}",
    )
    assert int(closed["bytes_up"]) == len(sent), (len(sent), closed.raw)
    assert int(closed["bytes_down"]) == len(received), (len(received), closed.raw)


def test_log_ip_literal_entry(proxy, origins):
    _status, _body, _der, cport = https_get(proxy, "127.0.0.1", origins.ip.port, "/small")
    line = proxy.connection_log(cport)
    assert line.get("outcome") == "allowed" and line.get("host") == "127.0.0.1", line.raw
    assert line.get("entry") == 'hosts."127.0.0.1"', line.raw


def test_daemon_alive_after_module(proxy):
    proxy.assert_alive("after the allow tests")
