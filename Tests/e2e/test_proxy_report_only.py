"""`pinproxy run`: `enforce = false` (report-only).

Report-only relaxes pin-mismatch, revocation-unknown, host-denied and port-denied: such a
connection is allowed, logged as outcome=report-only with the reason it would have been
refused for, and its 200 carries `Pinproxy-Verdict: would-refuse <reason>`.  The certificate
itself (untrusted-chain, certificate-expired, certificate-not-yet-valid, hostname-mismatch,
revoked) is always enforced: a client behind pinproxy trusts pinproxy's CA and has no check of
its own left.  Failures that leave nothing to tunnel to are still refused.
"""

from __future__ import annotations

import subprocess

import pytest

import origin as originlib
from proxy_harness import (
    API,
    PIN_X,
    PIN_Y,
    TIMEOUT,
    Tunnel,
    clean_env,
    connect,
    curl,  # noqa: F401 (fixture)
    expect_refusal,
    module_proxies,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    run_curl,
    sha256,
)

CDN = "a.cdn.test"  # a report-only wildcard entry, as the reference config suggests for trying out pins
ELSEWHERE = "mitm.elsewhere.test"  # no entry: the report-only [default]
INSECURE = "insecure.test"


@pytest.fixture(scope="module")
def mitm(pki):
    """What a man in the middle serves: a self-signed, expired certificate for another name."""
    o = originlib.TLSOrigin(pki.path("expired-selfsigned.pem"), pki.path("expired-selfsigned.key"), name="mitm")
    yield o
    o.close()


@pytest.fixture(scope="module")
def proxy(module_proxies, origins, mitm):
    return module_proxies(
        proxy={"allow_ports": [origins.api.port, origins.untrusted.port, origins.closed.port, origins.expired.port,
                               mitm.port]},
        resolve={API: "127.0.0.1", "www.api.test": "127.0.0.1", CDN: "127.0.0.1", ELSEWHERE: "127.0.0.1",
                 INSECURE: "127.0.0.1"},
        default={"enforce": False},
        hosts={
            API: {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X, PIN_Y], "enforce": False},
            "www.api.test": {"trust": ["root-a.pem"], "enforce": False},
            "*.cdn.test": {"pin": "public-key", "pins": [PIN_X, PIN_Y], "enforce": False},
            INSECURE: {"action": "allow-insecure"},
        },
    )


def report_only_line(proxy, client_port: int):
    line = proxy.connection_log(client_port)
    assert line.get("outcome") == "report-only", line.raw
    return line


def test_pin_mismatch_allowed_reported_and_marked(proxy, origins, pki):
    c = connect(proxy.port, API, origins.api.port)
    c.close()
    assert c.answer.status == 200, c.answer
    assert c.answer.headers.get("pinproxy-verdict") == "would-refuse pin-mismatch", c.answer
    with Tunnel(proxy, API, origins.api.port) as t:
        assert t.get("/small") == (200, originlib.SMALL_BODY)
        cport = t.client_port
    line = report_only_line(proxy, cport)
    assert line.get("reason") == "pin-mismatch", line.raw
    assert line.get("entry") == 'hosts."api.test"', line.raw
    assert pki.spki("api") in line.get("chain", ""), line.raw
    assert line.get("verified_pins") == ",".join(pki.spki(stem) for stem in ("api", "int-a", "root-a")), line.raw
    proxy.wait_for_log(lambda l: l.get("event") == "tunnel-closed" and l.get("client") == f"127.0.0.1:{cport}",
                       what="the report-only tunnel's tunnel-closed line")


def test_curl_verbose_shows_the_verdict_header(proxy, origins, curl):
    ca, _ = proxy.ca()
    r = subprocess.run([curl, "-sv", "-o", "/dev/null", "--max-time", str(TIMEOUT), "-x", proxy.url, "--cacert", str(ca),
                        f"https://{API}:{origins.api.port}/small"],
                       capture_output=True, text=True, env=clean_env(), timeout=TIMEOUT + 5)
    assert r.returncode == 0, r.stderr
    assert "< Pinproxy-Verdict: would-refuse pin-mismatch" in r.stderr, r.stderr


def test_pin_mismatch_report_only_with_curl_big_body(proxy, origins, curl):
    r = run_curl(curl, proxy, f"https://{API}:{origins.api.port}/big")
    assert r.exit == 0 and r.http_code == 200, r
    assert len(r.body) == originlib.BIG_SIZE and sha256(r.body) == originlib.big_sha256()


def test_untrusted_chain_refused_even_report_only(proxy, origins, pki):
    _, line = expect_refusal(proxy, "www.api.test", origins.untrusted.port, "untrusted-chain")
    assert pki.spki("untrusted") in line.get("chain", ""), line.raw
    assert "verified_pins" not in line, line.raw  # OpenSSL verified no path


def test_expired_refused_even_report_only(proxy, origins):
    expect_refusal(proxy, "www.api.test", origins.expired.port, "certificate-expired")


@pytest.mark.parametrize("host", [CDN, ELSEWHERE], ids=["report-only-entry", "report-only-default"])
def test_man_in_the_middle_is_refused(proxy, mitm, host):
    """The issue's reproduction: self-signed, expired, for another name — refused, not tunnelled."""
    ans, line = expect_refusal(proxy, host, mitm.port, "untrusted-chain")
    assert "pinproxy-verdict" not in ans.headers, ans
    detail = line.get("detail", "")
    assert "certificate-expired" in detail or "hostname-mismatch" in detail or "untrusted-chain" in detail, line.raw


def test_allow_insecure_is_marked(proxy, origins):
    c = connect(proxy.port, INSECURE, origins.untrusted.port)
    c.close()
    assert c.answer.status == 200, c.answer
    assert c.answer.headers.get("pinproxy-verdict") == "insecure", c.answer


def test_plain_allow_has_no_verdict_header(proxy, origins, pki):
    """A report-only entry whose checks all pass is a plain allow: no marker."""
    c = connect(proxy.port, "www.api.test", origins.api.port)
    c.close()
    assert c.answer.status == 200, c.answer
    assert "pinproxy-verdict" not in c.answer.headers, c.answer


def test_unreachable_upstream_still_refused(proxy, origins):
    """Report-only relaxes the policy, not physics: there is nothing to tunnel to."""
    expect_refusal(proxy, API, origins.closed.port, "upstream-unreachable")
