"""The client certificate on the transparent listener: only for a server that passed the verdict.

A local user sends api.test's SNI to any address it likes, and the egress lock sends the
connection to pinproxy, whose upstream is that address. In a fresh network namespace
(capture_harness.py), the pinned api.test origin, which requires a client certificate, listens on
127.0.0.1:443, and an impostor on 127.0.0.2:443: a valid api.test certificate with a key the entry
does not pin, which asks for a client certificate and takes whatever it gets. Over TLS 1.2 and 1.3,
the impostor receives nothing (no Certificate, no CertificateVerify) and the client gets the
pin-mismatch refusal inside TLS; the pinned origin gets pinproxy's certificate.
"""

from __future__ import annotations

import ssl

import pytest

from capture_harness import capture, public_dir  # noqa: F401 (fixtures)
from mtls_origin import ClientPKI, MTLSOrigin
from proxy_harness import pinned_entry, poll

VERSIONS = {"tls1.2": ssl.TLSVersion.TLSv1_2, "tls1.3": ssl.TLSVersion.TLSv1_3}


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_only_the_pinned_server_gets_the_client_certificate(capture, pki, tmp_path, version):
    clients = ClientPKI(tmp_path / "clients")
    tls = VERSIONS[version]
    origin = capture.ns.call(MTLSOrigin, pki.path("api-chain.pem"), pki.path("api.key"), clients.ca,
                             address="127.0.0.1", port=443, version=tls)
    impostor = capture.ns.call(MTLSOrigin, pki.path("api-newkey-chain.pem"), pki.path("api-newkey.key"), clients.ca,
                               address="127.0.0.2", port=443, verify_mode=ssl.CERT_OPTIONAL, version=tls)
    try:
        entry = pinned_entry(pki, "api", "api-rsa", client_certificate=str(clients.path("pinproxy-client-chain.pem")),
                             client_key=str(clients.path("pinproxy-client.key")))
        proxy = capture.proxy(hosts={"api.test": entry})
        proxy.lock()
        ca = capture.ca(proxy)

        fetched = capture.curl("https://api.test/mtls", ca, "api.test:443:127.0.0.2")
        assert fetched.status == 403 and "pinproxy refused api.test:443: pin-mismatch" in fetched.body, f"{fetched}"
        poll(lambda: impostor.received, what="the impostor's record of the connection")
        assert impostor.received == ["nothing"], (impostor.received, impostor.seen)
        line = proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("outcome") == "refused")
        assert (line.get("reason"), line.get("listener")) == ("pin-mismatch", "transparent"), line.raw
        assert "client certificate withheld" in line.get("detail", ""), line.raw

        fetched = capture.curl("https://api.test/mtls", ca, "api.test:443:127.0.0.1")
        assert fetched.exit == 0 and fetched.status == 200 and fetched.body == "client=pinproxy-client\n", f"{fetched}"
        poll(lambda: origin.received, what="the pinned origin's record of the connection")
        assert origin.received == ["certificate"] and origin.versions == [{"tls1.2": "TLSv1.2", "tls1.3": "TLSv1.3"}[version]], \
            (origin.received, origin.versions)
        assert impostor.received == ["nothing"], "the impostor was reached again"
    finally:
        origin.close()
        impostor.close()
