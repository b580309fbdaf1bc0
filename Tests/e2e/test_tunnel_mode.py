"""`mode = "tunnel"`: for a host entry, the client's TLS is relayed as it is, unverified.

For programs that pin their own certificates or must present their own client certificate:
here an origin that requires a client certificate (Python ssl, CERT_REQUIRED) is reached by
curl with its own certificate through a tunnel entry, and sees that certificate. The decision
line says `outcome=tunnel` and a counter counts it. A ClientHello that carries
`encrypted_client_hello` (crafted here: no client at hand speaks ECH) is refused for a tunnel
entry, `destination-mismatch`, and not a byte reaches the origin. `check` refuses a tunnel in
`[default]` and with keys a tunnel cannot apply, and warns for every tunnel entry, louder for
wildcards. Every address is loopback ([resolve]).
"""

from __future__ import annotations

import os
import ssl
import subprocess

import pytest

from conftest import diagnostics
from mtls_origin import clients, origin  # noqa: F401 (fixtures)
from proxy_harness import (
    API,
    TIMEOUT,
    clean_env,
    connect,
    curl,  # noqa: F401 (fixture)
    free_port,
    make_proxy,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    poll,
    port_accepts,
    read_to_eof,
)
from service_support import scrape



@pytest.fixture
def proxy(make_proxy, origin):
    mport = free_port()
    p = make_proxy(proxy={"allow_ports": [origin.port], "metrics_listen": f"127.0.0.1:{mport}"},
                   hosts={API: {"mode": "tunnel"}})
    p.metrics_port = mport
    poll(lambda: port_accepts(mport), what="the metrics listener")
    return p


def curl_with_own_certificate(curl_bin, proxy, pki, clients, port: int) -> subprocess.CompletedProcess:
    """curl through the proxy, trusting the origin's real CA (not pinproxy's) and presenting its own certificate."""
    argv = [curl_bin, "-sS", "-v", "-x", proxy.url, "--cacert", str(pki.path("root-a.pem")),
            "--cert", str(clients.path("own-client-chain.pem")), "--key", str(clients.path("own-client.key")),
            "--max-time", "30", f"https://{API}:{port}/tunnel"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=clean_env())


def test_client_reaches_an_mtls_origin_with_its_own_certificate(proxy, origin, pki, clients, curl):
    assert scrape(proxy.metrics_port).value("pinproxy_connections_total", outcome="tunnel") == 0
    mark = proxy.mark()
    p = curl_with_own_certificate(curl, proxy, pki, clients, origin.port)
    assert p.returncode == 0, (p.stderr, proxy.describe())
    assert p.stdout == "client=own-client\n", p.stdout
    assert "< Pinproxy-Verdict: tunnel" in p.stderr, p.stderr
    assert origin.seen == ["client=own-client"], origin.seen
    line = proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("port") == str(origin.port), since=mark,
                              what="the decision line")
    assert line["outcome"] == "tunnel" and line["status"] == "200" and line["entry"] == f'hosts."{API}"', line.raw
    assert "reason" not in line and "chain" not in line, line.raw
    closed = proxy.wait_for_log(lambda l: l.get("event") == "tunnel-closed" and l.get("port") == str(origin.port), since=mark,
                                what="the tunnel-closed line")
    assert int(closed["bytes_up"]) > 0 and int(closed["bytes_down"]) > 0, closed.raw
    assert scrape(proxy.metrics_port).value("pinproxy_connections_total", outcome="tunnel") == 1


def test_the_client_sees_the_origins_own_certificate(proxy, origin, pki, clients):
    c = connect(proxy.port, API, origin.port)
    assert c.answer.status == 200 and c.answer.headers.get("pinproxy-verdict") == "tunnel", c.answer
    ctx = ssl.create_default_context(cafile=str(pki.path("root-a.pem")))
    ctx.load_cert_chain(str(clients.path("own-client-chain.pem")), str(clients.path("own-client.key")))
    with ctx.wrap_socket(c.sock, server_hostname=API) as tls:
        assert tls.getpeercert(binary_form=True) == pki.issued("api").der
        tls.sendall(f"GET / HTTP/1.1\r\nHost: {API}\r\n\r\n".encode())
        data, _ = read_to_eof(tls, TIMEOUT)
    assert data.endswith(b"client=own-client\n"), data


def client_hello(server_name: str, encrypted_client_hello: bool) -> bytes:
    """A TLS 1.3 ClientHello record (RFC 8446 4.1.2) for SERVER_NAME, with an ECH extension
    (0xfe0d, an outer ECHClientHello, draft-ietf-tls-esni 5) when asked."""
    def extension(kind: int, body: bytes) -> bytes:
        return kind.to_bytes(2, "big") + len(body).to_bytes(2, "big") + body

    name = server_name.encode()
    extensions = (
        extension(0x0000, (len(name) + 3).to_bytes(2, "big") + b"\x00" + len(name).to_bytes(2, "big") + name)
        + extension(0x002b, b"\x02\x03\x04")  # supported_versions: TLS 1.3
        + extension(0x000a, b"\x00\x02\x00\x1d")  # supported_groups: x25519
        + extension(0x000d, b"\x00\x02\x04\x03")  # signature_algorithms: ecdsa_secp256r1_sha256
        + extension(0x0033, b"\x00\x24\x00\x1d\x00\x20" + os.urandom(32))  # key_share
    )
    if encrypted_client_hello:
        # outer; HPKE-SHA256 / AES-128-GCM; config id; enc; payload
        extensions += extension(0xfe0d, b"\x00\x00\x01\x00\x01\x2a" + b"\x00\x20" + os.urandom(32) + b"\x00\x80" + os.urandom(128))
    body = (b"\x03\x03" + os.urandom(32) + b"\x20" + os.urandom(32) + b"\x00\x02\x13\x01" + b"\x01\x00"
            + len(extensions).to_bytes(2, "big") + extensions)
    handshake = b"\x01" + len(body).to_bytes(3, "big") + body
    return b"\x16\x03\x01" + len(handshake).to_bytes(2, "big") + handshake


def send_hello(proxy, port: int, hello: bytes) -> tuple[bytes, int]:
    c = connect(proxy.port, API, port)
    assert c.answer.status == 200, c.answer
    c.sock.sendall(hello)
    data, _ = read_to_eof(c.sock, TIMEOUT)
    c.sock.close()
    return data, c.client_port


def test_encrypted_client_hello_is_refused_and_nothing_is_relayed(proxy, origin):
    mark = proxy.mark()
    data, client_port = send_hello(proxy, origin.port, client_hello(API, encrypted_client_hello=True))
    assert data == b"", data
    line = proxy.connection_log(client_port)
    assert line["outcome"] == "refused" and line["reason"] == "destination-mismatch" and line["status"] == "200", line.raw
    assert "encrypted_client_hello" in line["detail"], line.raw
    poll(lambda: origin.seen == ["no-bytes"], what=f"the origin to see a connection without a byte: {origin.seen}")
    assert not [l for l in proxy.logs(mark) if l.get("event") == "tunnel-closed"]
    metrics = scrape(proxy.metrics_port)
    assert metrics.value("pinproxy_connections_total", outcome="refused", reason="destination-mismatch") == 1
    assert metrics.value("pinproxy_connections_total", outcome="tunnel") == 0


def test_the_same_client_hello_without_ech_is_relayed(proxy, origin):
    """The control: the crafted ClientHello goes through when it carries no ECH (the origin
    answers it with its ServerHello)."""
    c = connect(proxy.port, API, origin.port)
    assert c.answer.status == 200, c.answer
    with c.sock:
        c.sock.sendall(client_hello(API, encrypted_client_hello=False))
        answer = c.sock.recv(5)
        assert answer[:3] == b"\x16\x03\x03", answer  # a handshake record: the origin's ServerHello
    assert proxy.connection_log(c.client_port)["outcome"] == "tunnel"
    poll(lambda: origin.seen == ["handshake-failed"], what=f"the origin's handshake to end: {origin.seen}")


def test_a_tunnel_refusal_before_the_200_is_still_on_the_connect(make_proxy, origins):
    """An unreachable tunnel upstream is refused on the CONNECT, even under refusal = "in-tls"
    (the client checks its own server: a page behind pinproxy's leaf is no use to it)."""
    p = make_proxy(proxy={"allow_ports": [origins.closed.port], "refusal": "in-tls"}, hosts={API: {"mode": "tunnel"}})
    c = connect(p.port, API, origins.closed.port)
    assert c.answer.status == 502 and c.answer.refusal == "upstream-unreachable", c.answer


# --------------------------------------------------------------------------- check


def test_tunnel_in_default_is_a_check_error(ws):
    cfg = ws.config('[default]\ntrust = "system"\nmode = "tunnel"\n')
    res = ws.check(cfg)
    assert res.code == 1, res
    errors = diagnostics(res.err, str(cfg))
    assert [(d.line, d.warning) for d in errors] == [(3, False)], res
    assert "not allowed in [default]" in errors[0].message, res


def test_check_warns_for_every_tunnel_entry_louder_for_wildcards(ws):
    cfg = ws.config("""
        [hosts."api.test"]
        mode = "tunnel"
        [hosts."*.cdn.test"]
        mode = "tunnel"
        [hosts."pinned.test"]
        mode = "tunnel"
        verify_command = ["/bin/true"]
        """)
    res = ws.check(cfg)
    assert res.code == 1, res
    assert [(d.line, d.warning) for d in diagnostics(res.err, str(cfg))] == [(8, False)], res
    cfg = ws.config(cfg.read_text().replace('verify_command = ["/bin/true"]\n', ""))
    res = ws.check(cfg)
    assert res.code == 0, res
    warnings = diagnostics(res.out, str(cfg))
    assert [(d.line, d.warning) for d in warnings] == [(3, True), (5, True), (7, True)], res
    assert "0 report-only, 3 tunnel" in res.out and "api.test                         tunnel (relayed unverified)" in res.out, res
    assert "relayed as it is" in warnings[0].message and "EVERY name it matches" in warnings[1].message, res
