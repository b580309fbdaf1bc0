"""`pinproxy evaluate` on chains that OpenSSL verifies but a web-PKI rule refuses: the detail
names the rule (docs/trust-decisions.md), and `require_web_pki_profile = false` relaxes the
issuance rules for a private CA.
"""

from __future__ import annotations

from conftest import AT, host, pkilib


def _chain(ws, name: str, **leaf_options) -> str:
    int_a = ws.pki.issued("int-a")
    leaf = pkilib.make_leaf("api.test", int_a, san_dns=["api.test"], **leaf_options)
    pkilib.write_pem(ws.path(name), leaf.cert, int_a.cert)
    return name


def test_evaluate_names_the_rule(ws):
    chain = _chain(ws, "no-eku-chain.pem", eku=False)
    res = ws.evaluate(ws.config(host("api.test", trust=["root-a.pem"])), "api.test", chain, at=AT)
    assert res.first == "refuse: untrusted-chain", res
    assert res.code == 1, res
    assert "rule leaf-extended-key-usage: " in res.detail, res


def test_private_ca_relaxation(ws):
    chain = _chain(ws, "no-eku-chain.pem", eku=False)
    cfg = ws.config(host("api.test", trust=["root-a.pem"], require_web_pki_profile=False))
    res = ws.evaluate(cfg, "api.test", chain, at=AT)
    assert res.first == "allow", res


def test_name_rule_is_a_hostname_mismatch(ws):
    int_a = ws.pki.issued("int-a")
    leaf = pkilib.make_leaf("*.co.uk", int_a, san_dns=["*.co.uk"])
    pkilib.write_pem(ws.path("suffix-wildcard-chain.pem"), leaf.cert, int_a.cert)
    res = ws.evaluate(ws.config(host("shop.co.uk", trust=["root-a.pem"])), "shop.co.uk", "suffix-wildcard-chain.pem", at=AT)
    assert res.first == "refuse: hostname-mismatch", res
    assert "rule wildcard-public-suffix: " in res.detail, res
