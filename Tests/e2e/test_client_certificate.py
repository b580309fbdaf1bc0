"""`client_certificate` and `client_key`: what pinproxy presents to an upstream that asks for a
client certificate (mutual TLS), per entry.

The origin requires a certificate from its own client CA (Python ssl, CERT_REQUIRED). Through
an intercepting entry with `client_certificate`, curl (which has no certificate of its own)
reaches it, and the origin sees pinproxy's identity; without the keys, the upstream handshake
fails and the CONNECT is refused. `check` refuses a key file others may read (mode 0644) with
`FILE:LINE`, accepts one under `$CREDENTIALS_DIRECTORY` (systemd's `LoadCredential=`), and
warns that every local process that reaches the entry uses that identity.

The certificate goes only to a server that passed the verdict, judged when it asks for it: an
impostor (a valid api.test certificate with a key the entry does not pin, which asks for a client
certificate and takes whatever it gets) receives nothing, over TLS 1.2 and 1.3, and the
connection is refused pin-mismatch; under `enforce = false` it gets an empty Certificate and the
decision line says the certificate was withheld. `check` refuses `client_certificate` with
`verify_command` or `allow-insecure`. The next connections resume the admitted session, at
either version, with no certificate exchange. The transparent listener:
test_capture_client_certificate.py.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess

import pytest

from conftest import diagnostics
from mtls_origin import MTLSOrigin, clients, origin  # noqa: F401 (fixtures)
from proxy_harness import (
    API,
    curl,  # noqa: F401 (fixture)
    make_proxy,  # noqa: F401 (fixture)
    pinned_entry,
    poll,
    run_curl,
)

VERSIONS = {"tls1.2": ssl.TLSVersion.TLSv1_2, "tls1.3": ssl.TLSVersion.TLSv1_3}
#: What ``SSLSocket.version()`` says of each.
NAMES = {ssl.TLSVersion.TLSv1_2: "TLSv1.2", ssl.TLSVersion.TLSv1_3: "TLSv1.3"}



def entry(clients, **extra) -> dict:
    return {"trust": ["root-a.pem"], "client_certificate": str(clients.path("pinproxy-client-chain.pem")),
            "client_key": str(clients.path("pinproxy-client.key")), **extra}


def test_an_intercepting_entry_presents_its_client_certificate(make_proxy, origin, clients, curl):
    p = make_proxy(proxy={"allow_ports": [origin.port]}, hosts={API: entry(clients)})
    res = run_curl(curl, p, f"https://{API}:{origin.port}/mtls")
    assert res.exit == 0 and res.connect_code == 200 and res.http_code == 200, (res, p.describe())
    assert res.body == b"client=pinproxy-client\n", res.body
    assert origin.seen == ["client=pinproxy-client"], origin.seen


def pinned(pki, clients, **extra) -> dict:
    """api.test pinned to its own keys (api, api-rsa), with the client certificate."""
    return pinned_entry(pki, "api", "api-rsa", client_certificate=str(clients.path("pinproxy-client-chain.pem")),
                        client_key=str(clients.path("pinproxy-client.key")), **extra)


@pytest.fixture(params=sorted(VERSIONS))
def version(request):
    return VERSIONS[request.param]


@pytest.fixture
def impostor(pki, clients, version):
    """A server for api.test with a key nobody pinned (api-newkey, from the right CA), which asks
    for a client certificate and takes any it is given (or none), at one TLS version."""
    o = MTLSOrigin(pki.path("api-newkey-chain.pem"), pki.path("api-newkey.key"), clients.ca,
                   verify_mode=ssl.CERT_OPTIONAL, version=version)
    yield o
    o.close()


def recorded(origin, count: int = 1) -> list[str]:
    poll(lambda: len(origin.received) >= count, what=f"{count} connection(s) recorded by the origin")
    return origin.received


def test_an_impostor_gets_no_client_certificate(make_proxy, impostor, pki, clients, curl):
    p = make_proxy(proxy={"allow_ports": [impostor.port]}, hosts={API: pinned(pki, clients)})
    res = run_curl(curl, p, f"https://{API}:{impostor.port}/mtls")
    assert res.connect_code == 403 and res.http_code == 0, res
    assert recorded(impostor) == ["nothing"], (impostor.received, impostor.seen)
    line = p.wait_for_log(lambda l: l.get("event") == "connection", what="the decision line")
    assert (line["outcome"], line["reason"]) == ("refused", "pin-mismatch"), line.raw
    assert "client certificate withheld" in line["detail"], line.raw


def test_report_only_withholds_the_client_certificate_and_says_so(make_proxy, impostor, pki, clients, curl, version):
    p = make_proxy(proxy={"allow_ports": [impostor.port]}, hosts={API: pinned(pki, clients, enforce=False)})
    res = run_curl(curl, p, f"https://{API}:{impostor.port}/mtls")
    assert res.exit == 0 and res.connect_code == 200 and res.http_code == 200, res
    assert res.body == b"client=None\n", res.body
    assert recorded(impostor) == ["empty"], (impostor.received, impostor.seen)
    assert impostor.versions == [NAMES[version]], impostor.versions
    line = p.wait_for_log(lambda l: l.get("event") == "connection", what="the decision line")
    assert (line["outcome"], line["reason"]) == ("report-only", "pin-mismatch"), line.raw
    assert "client certificate withheld" in line["detail"], line.raw


def test_the_pinned_server_gets_the_certificate_at_either_version(make_proxy, pki, clients, curl, version):
    o = MTLSOrigin(pki.path("api-chain.pem"), pki.path("api.key"), clients.ca, version=version)
    try:
        p = make_proxy(proxy={"allow_ports": [o.port]}, hosts={API: pinned(pki, clients)})
        res = run_curl(curl, p, f"https://{API}:{o.port}/mtls")
        assert res.exit == 0 and res.connect_code == 200 and res.http_code == 200, (res, p.describe())
        assert res.body == b"client=pinproxy-client\n", res.body
        assert recorded(o) == ["certificate"] and o.seen == ["client=pinproxy-client"], (o.received, o.seen)
        assert o.versions == [NAMES[version]], o.versions
        line = p.wait_for_log(lambda l: l.get("event") == "connection", what="the decision line")
        assert line["outcome"] == "allowed" and "withheld" not in line.get("detail", ""), line.raw
    finally:
        o.close()


def test_a_resumed_session_is_judged_by_its_verdict_without_a_certificate_exchange(make_proxy, pki, clients, curl, version):
    """The next connections resume the session the verdict admitted (TLS 1.2: the session of the
    handshake; TLS 1.3: a ticket that came after it, before the answer): the server presents no
    certificate and asks for none (it knows the client from the session); the verdict on the
    chain stored with the session admits it, and the origin still sees pinproxy's identity.

    The origin answers `Connection: close` and closes without a close_notify, as many servers
    do. OpenSSL 3 takes that for a fatal error and marks the connection's session not
    resumable; so does freeing an SSL that sent none. The cache held that very session, so this
    origin was never resumed, until the cache kept a copy of its own (`SessionSlot.offer`)."""
    o = MTLSOrigin(pki.path("api-chain.pem"), pki.path("api.key"), clients.ca, version=version)
    try:
        p = make_proxy(proxy={"allow_ports": [o.port]}, hosts={API: pinned(pki, clients)})
        for count in (1, 2, 3):
            res = run_curl(curl, p, f"https://{API}:{o.port}/mtls")
            assert res.exit == 0 and res.http_code == 200 and res.body == b"client=pinproxy-client\n", (res, res.body)
            recorded(o, count)
        assert o.received == ["certificate", "nothing", "nothing"], o.received
        assert o.versions == [NAMES[version]] * 3, o.versions
        lines = poll(lambda: (ls := [l for l in p.logs() if l.get("event") == "connection"]) and len(ls) == 3 and ls,
                     what="three decision lines")
        assert [l["outcome"] for l in lines] == ["allowed"] * 3, [l.raw for l in lines]
        resumed = ["upstream TLS session resumed" in l.get("detail", "") for l in lines]
        assert resumed == [False, True, True], [l.raw for l in lines]
    finally:
        o.close()


def test_without_it_the_decision_line_says_the_upstream_asked(make_proxy, origin, curl):
    """The issue's starting point: an upstream that asks for a client certificate, and an entry
    that has none to give. Over TLS 1.3 the server refuses only after the handshake (curl:
    "Empty reply from server"): the decision line says why."""
    p = make_proxy(proxy={"allow_ports": [origin.port]}, hosts={API: {"trust": ["root-a.pem"]}})
    res = run_curl(curl, p, f"https://{API}:{origin.port}/mtls")
    assert res.exit != 0 and res.http_code == 0, res
    line = p.wait_for_log(lambda l: l.get("event") == "connection", what="the decision line")
    assert line["outcome"] == "allowed", line.raw
    assert "the upstream asked for a client certificate" in line["detail"] and "client_certificate" in line["detail"], line.raw
    assert origin.seen == ["handshake-failed"], origin.seen


def write_config(ws, clients, key_name: str = "pinproxy-client.key") -> tuple:
    shutil.copy(clients.path("pinproxy-client-chain.pem"), ws.path("client.pem"))
    key = ws.path(key_name)
    shutil.copy(clients.path("pinproxy-client.key"), key)
    cfg = ws.config(f"""\
        [hosts."api.test"]
        trust = ["root-a.pem"]
        client_certificate = "client.pem"
        client_key = "{key_name}"
        """)
    return cfg, key


def test_a_key_others_may_read_is_a_check_error(ws, clients):
    cfg, key = write_config(ws, clients)
    os.chmod(key, 0o644)
    res = ws.check(cfg)
    assert res.code == 1, res
    errors = diagnostics(res.err, str(cfg))
    assert [(d.line, d.warning) for d in errors] == [(4, False)], res
    assert "has mode 0644" in errors[0].message and "LoadCredential=" in errors[0].message, res
    for mode in (0o600, 0o400):
        os.chmod(key, mode)
        res = ws.check(cfg)
        assert res.code == 0, res
        warnings = diagnostics(res.out, str(cfg))
        assert [(d.line, d.warning) for d in warnings] == [(3, True)], res
        assert "every local process that may reach" in warnings[0].message, res


def test_a_key_from_load_credential_may_have_any_mode(ws, clients, pinproxy):
    credentials = ws.path("credentials")
    credentials.mkdir()
    cfg, key = write_config(ws, clients, key_name="credentials/api.key")
    os.chmod(key, 0o644)
    env = dict(os.environ, CREDENTIALS_DIRECTORY=str(credentials))
    p = subprocess.run([str(pinproxy), "check", "--config", str(cfg)], capture_output=True, text=True, env=env,
                       stdin=subprocess.DEVNULL, timeout=60)
    assert p.returncode == 0, (p.stdout, p.stderr)


def test_half_an_identity_and_a_wrong_key_are_check_errors(ws, clients):
    cfg, key = write_config(ws, clients)
    cfg.write_text(cfg.read_text().replace('client_key = "pinproxy-client.key"\n', ""))
    res = ws.check(cfg)
    assert res.code == 1 and [d.line for d in diagnostics(res.err, str(cfg))] == [3], res
    cfg, key = write_config(ws, clients)
    shutil.copy(clients.path("own-client.key"), key)
    res = ws.check(cfg)
    assert res.code == 1 and [d.line for d in diagnostics(res.err, str(cfg))] == [4], res
    assert "is not the key of client_certificate" in res.err, res


@pytest.mark.parametrize("key, value, why", [
    ("verify_command", '["/bin/true"]', "verify_command cannot answer there"),
    ("action", '"allow-insecure"', "allow-insecure checks none"),
])
def test_a_client_certificate_only_goes_with_a_verdict_made_in_the_handshake(ws, clients, key, value, why):
    """The certificate is presented during the handshake, once the server passed the verdict:
    an entry that checks no server, or whose verify_command would answer later, is refused."""
    cfg, _ = write_config(ws, clients)
    cfg.write_text(cfg.read_text() + f"{key} = {value}\n")
    res = ws.check(cfg)
    assert res.code == 1, res
    errors = diagnostics(res.err, str(cfg))
    assert [(d.line, d.warning) for d in errors] == [(3, False)], res
    assert why in errors[0].message, res
