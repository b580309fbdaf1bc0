"""`pinproxy run`: an upstream cannot renegotiate past the verdict.

A TLS 1.2 origin presents the pinned chain, passes the verdict, answers, then sends a
HelloRequest to renegotiate with another certificate (another root, an unpinned key). pinproxy
refuses the second handshake (SSL_OP_NO_RENEGOTIATION), closes the tunnel, and logs why
(`event=renegotiation-refused`, and `tunnel-closed` with `upstream renegotiation refused`).
Every byte the client receives came from the peer whose chain the verdict accepted: what the
origin sent before is relayed, nothing after. The origin (Tests/e2e/renegotiating_origin.py)
uses pyOpenSSL under the Debian python3 (python3-openssl, installed by scripts/setup).
"""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest

from proxy_harness import API, TIMEOUT, connect, make_proxy, pinned_entry  # noqa: F401 (fixture)

HERE = Path(__file__).resolve().parent
SYSTEM_PYTHON = "/usr/bin/python3"
BEFORE = b"bytes-sent-under-the-first-certificate\n"
AFTER = b"bytes-sent-after-renegotiation\n"


@pytest.fixture
def renegotiating_origin(pki):
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import OpenSSL"], capture_output=True)
    if probe.returncode != 0:
        pytest.fail(f"{SYSTEM_PYTHON} lacks pyOpenSSL: run scripts/setup --tests (apt: python3-openssl)", pytrace=False)
    proc = subprocess.Popen(
        [SYSTEM_PYTHON, str(HERE / "renegotiating_origin.py"),
         str(pki.path("api-chain.pem")), str(pki.path("api.key")),
         str(pki.path("untrusted-chain.pem")), str(pki.path("untrusted.key"))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        yield proc, int(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait()


def read_to_end(tls: ssl.SSLSocket) -> bytes:
    data = b""
    while True:
        try:
            chunk = tls.recv(65536)
        except (ssl.SSLError, ConnectionError, TimeoutError):
            return data
        if not chunk:
            return data
        data += chunk


def test_a_renegotiating_upstream_is_cut_off(make_proxy, pki, renegotiating_origin):
    origin, port = renegotiating_origin
    p = make_proxy(proxy={"allow_ports": [port]}, hosts={API: pinned_entry(pki, "api", "int-a")})
    c = connect(p.port, API, port)
    assert c.answer.status == 200, f"{c.answer}\n{p.describe()}"
    tls = p.client_context().wrap_socket(c.sock, server_hostname=API)
    tls.settimeout(TIMEOUT)
    tls.sendall(f"GET / HTTP/1.1\r\nHost: {API}\r\n\r\n".encode())
    received = read_to_end(tls)
    tls.close()

    assert BEFORE in received, received
    assert AFTER not in received, "bytes sent after a renegotiation reached the client"
    out, _ = origin.communicate(timeout=TIMEOUT)
    assert "renegotiated" not in out and "renegotiation-failed" in out, out

    refused = p.wait_for_log(lambda l: l.get("event") == "renegotiation-refused")
    assert refused["level"] == "warning" and "renegotiate" in refused["detail"], refused.raw
    closed = p.wait_for_log(lambda l: l.get("event") == "tunnel-closed")
    assert closed["detail"] == "upstream renegotiation refused", closed.raw
    assert int(closed["bytes_down"]) < len(BEFORE) + 200, closed.raw
