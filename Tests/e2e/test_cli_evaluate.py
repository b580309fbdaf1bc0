"""`pinproxy evaluate --config FILE --host NAME [--port N] --chain FILE [--at T] [--staple FILE]`.

First stdout line: `allow`, `refuse: <reason>` or `allow (would refuse: <reason>)`;
exit 0 (allow, report-only), 1 (refuse), 2 (usage / config error).  The detail after
the first line must name the matched entry, show the leaf's pins, and carry the
reason token of every failure found.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

import pytest

from conftest import AT, PIN_X, PIN_Y, certpin, default, host, pkilib, proxy, spki

UTC = dt.timezone.utc
TA = ["root-a.pem"]
X = PIN_X  # a well-formed pin that matches nothing
Y = PIN_Y


@dataclass
class Ev:
    id: str
    config: str
    expect: str  # the exact first line
    host: str = "api.test"
    chain: str = "api-chain.pem"
    port: int | None = None
    at: str | None = AT
    staple: str | None = None
    also: tuple[str, ...] = ()  # further reason tokens the detail must carry
    maybe: tuple[str, ...] = ()  # reason tokens the detail may carry (contract leaves it open)
    entry: str | None = None  # text naming the matched entry in the detail
    pins_shown: bool = True  # whether the chain is examined (the leaf's pins must be shown)
    matched: str | None = None  # a pin placeholder that matched and must be shown

    @property
    def code(self) -> int:
        return 0 if self.expect.startswith("allow") else 1

    @property
    def reason(self) -> str | None:
        if self.expect.startswith("refuse: "):
            return self.expect[len("refuse: "):]
        if self.expect.startswith("allow (would refuse: "):
            return self.expect[len("allow (would refuse: "):-1]
        return None


def evaluate_case(ws, c: Ev):
    cfg = ws.config(c.config)
    res = ws.evaluate(cfg, c.host, c.chain, port=c.port, at=c.at, staple=c.staple)
    assert res.first == c.expect, res
    assert res.code == c.code, res
    detail = res.detail
    wanted = set(([c.reason] if c.reason else []) + list(c.also))
    for token in sorted(wanted):
        assert token in detail, f"reason {token!r} missing from the detail\n{res}"
    extra = {r for r in REASONS if re.search(r"(?<![\w-])" + re.escape(r) + r"(?![\w-])", detail)} - wanted
    extra -= set(c.maybe)
    assert not extra, f"the detail reports failures that should not be found: {sorted(extra)}\n{res}"
    if c.entry is not None:
        assert c.entry in detail, f"matched entry {c.entry!r} not named in the detail\n{res}"
    if c.pins_shown:
        leaf = pkilib.load_certs(ws.path(c.chain))[0]
        assert pkilib.spki_pin(leaf) in detail, f"leaf public-key pin not shown\n{res}"
        assert pkilib.cert_pin(leaf) in detail, f"leaf certificate pin not shown\n{res}"
    if c.matched is not None:
        pin = ws.fill(c.matched)
        assert pin in detail, f"matched pin {pin} not shown\n{res}"
    return res


ALLOW = "allow"
REASONS = (
    "host-denied", "port-denied", "untrusted-chain", "certificate-expired", "certificate-not-yet-valid",
    "revoked", "revocation-unknown", "hostname-mismatch", "pin-mismatch",
)


def refuse(reason: str) -> str:
    return f"refuse: {reason}"


def would(reason: str) -> str:
    return f"allow (would refuse: {reason})"


def cases(*cs: Ev) -> list:
    return [pytest.param(c, id=c.id) for c in cs]


def pk(*pins, **kw) -> dict:
    return dict(pin="public-key", pins=list(pins), **kw)


def cp(*pins, **kw) -> dict:
    return dict(pin="certificate", pins=list(pins), **kw)


# ====================================================================== chain trust

TRUST = cases(
    Ev("trust-list-root", host("api.test", trust=TA), ALLOW, entry="api.test"),
    Ev("trust-list-fullchain-presented", host("api.test", trust=TA), ALLOW, chain="api-fullchain.pem"),
    Ev("trust-list-rsa-leaf", host("api.test", trust=TA), ALLOW, chain="api-rsa-chain.pem"),
    Ev("trust-list-second-san", host("www.api.test", trust=TA), ALLOW, host="www.api.test", entry="www.api.test"),
    Ev("trust-dir", host("api.test", trust=["anchors"]), ALLOW),
    Ev("trust-dir-mixed-extensions-pem", host("api.test", trust=["anchors-mixed"]), ALLOW),
    Ev("trust-dir-mixed-extensions-der", host("api.test", trust=["anchors-mixed"]), ALLOW, chain="untrusted-chain.pem"),
    Ev("trust-list-several", host("api.test", trust=["root-b.pem", "root-a.pem"]), ALLOW),
    Ev("trust-partial-chain-intermediate", host("api.test", trust=["int-a.pem"]), ALLOW),
    Ev("trust-partial-chain-intermediate-leaf-only", host("api.test", trust=["int-a.pem"]), ALLOW, chain="api.pem"),
    Ev("trust-partial-chain-leaf", host("api.test", trust=["api.pem"]), ALLOW, chain="api.pem"),
    Ev("untrusted-wrong-root", host("api.test", trust=["root-b.pem"]), refuse("untrusted-chain")),
    Ev("untrusted-other-hierarchy", host("api.test", trust=TA), refuse("untrusted-chain"), chain="untrusted-chain.pem"),
    Ev("untrusted-missing-intermediate", host("api.test", trust=TA), refuse("untrusted-chain"), chain="api.pem"),
    Ev("untrusted-system-trust-implicit", host("api.test"), refuse("untrusted-chain")),
    Ev("untrusted-system-trust-explicit", host("api.test", trust="system"), refuse("untrusted-chain")),
    Ev("untrusted-empty-config", "", refuse("untrusted-chain"), entry="default"),
    Ev("untrusted-eku-client-auth-only", host("api.test", trust=TA), refuse("untrusted-chain"), chain="client-only-chain.pem"),
    Ev("untrusted-path-length-exceeded", host("api.test", trust=TA), refuse("untrusted-chain"), chain="deep-chain.pem"),
    Ev("untrusted-self-signed-under-ca-trust", host("self.test", trust=TA), refuse("untrusted-chain"), host="self.test", chain="self.pem"),
    Ev("trust-list-self-signed-anchor", host("self.test", trust=["self.pem"]), ALLOW, host="self.test", chain="self.pem"),
    Ev("untrusted-same-key-same-subject-not-an-anchor", host("self.test", trust=["self.pem"]), refuse("untrusted-chain"),
       host="self.test", chain="self-rekeyed.pem"),
    Ev("untrusted-same-key-leaf-anchor", host("api.test", trust=["api.pem"]), refuse("untrusted-chain"), chain="api-rotated-chain.pem"),
)


@pytest.mark.parametrize("c", TRUST)
def test_trust(ws, c):
    evaluate_case(ws, c)


# ====================================================================== validity time

TIME = cases(
    Ev("expired-leaf", host("api.test", trust=TA), refuse("certificate-expired"), chain="expired-chain.pem"),
    Ev("not-yet-valid-leaf", host("api.test", trust=TA), refuse("certificate-not-yet-valid"), chain="notyet-chain.pem"),
    Ev("at-before-everything", host("api.test", trust=TA), refuse("certificate-not-yet-valid"), at="2019-06-01T00:00:00Z"),
    Ev("at-after-everything", host("api.test", trust=TA), refuse("certificate-expired"), at="2046-01-01T00:00:00Z"),
    Ev("at-omitted-uses-now", host("api.test", trust=TA), ALLOW, at=None),
    Ev("at-with-offset", host("api.test", trust=TA), ALLOW, at="2026-06-01T02:00:00+02:00"),
    Ev("at-fractional-seconds", host("api.test", trust=TA), ALLOW, at="2026-06-01T00:00:00.5Z"),
    # A date alone is its first instant, UTC.
    Ev("at-a-date-alone", host("api.test", trust=TA), refuse("certificate-expired"), at="2046-01-01"),
    Ev("at-a-date-alone-valid", host("api.test", trust=TA), ALLOW, at="2026-06-01"),
    # At 2012 the old leaf is fine but int-a (2020..2045) is not yet valid.
    Ev("time-applies-to-every-cert", host("api.test", trust=TA), refuse("certificate-not-yet-valid"),
       chain="expired-chain.pem", at="2012-06-01T00:00:00Z"),
)


@pytest.mark.parametrize("c", TIME)
def test_time(ws, c):
    evaluate_case(ws, c)


def test_a_date_alone_is_midnight_utc(ws):
    cfg = ws.config(host("api.test", trust=TA))
    r = ws.evaluate(cfg, "api.test", "api-chain.pem", at="2046-01-01")
    assert "at: 2046-01-01T00:00:00Z" in r.out, r


@pytest.mark.parametrize("at", ["2046-13-01", "2046-01-01x", "tomorrow"])
def test_a_bad_time_is_a_usage_error_of_evaluate(ws, at):
    r = ws.evaluate(ws.config(host("api.test", trust=TA)), "api.test", "api-chain.pem", at=at)
    assert r.code == 2, r
    assert f'--at "{at}" is not an RFC 3339 time' in r.err, r
    assert "Usage: pinproxy evaluate " in r.err and "Usage: pinproxy <subcommand>" not in r.err, r


# ====================================================================== host names

D = default(trust=TA)

NAMES = cases(
    Ev("name-other-host", D, refuse("hostname-mismatch"), host="other.test", entry="default"),
    Ev("name-subdomain-not-covered", D, refuse("hostname-mismatch"), host="foo.api.test"),
    Ev("name-other-cert", host("api.test", trust=TA), refuse("hostname-mismatch"), chain="other-chain.pem"),
    Ev("name-no-cn-fallback", host("api.test", trust=TA), refuse("hostname-mismatch"), chain="cn-only-chain.pem"),
    Ev("name-host-uppercase", host("api.test", trust=TA), ALLOW, host="API.Test", entry="api.test"),
    Ev("name-host-trailing-dot", host("api.test", trust=TA), ALLOW, host="api.test.", entry="api.test"),
    Ev("name-wildcard-one-label", host("*.wild.test", trust=TA), ALLOW, host="a.wild.test", chain="wild-chain.pem",
       entry="*.wild.test"),
    Ev("name-wildcard-not-two-labels", D, refuse("hostname-mismatch"), host="a.b.wild.test", chain="wild-chain.pem"),
    Ev("name-wildcard-not-apex", D, refuse("hostname-mismatch"), host="wild.test", chain="wild-chain.pem"),
    Ev("name-ipv4", host("127.0.0.1", trust=TA), ALLOW, host="127.0.0.1", chain="ip-chain.pem", entry="127.0.0.1"),
    Ev("name-ipv6", host("::1", trust=TA), ALLOW, host="::1", chain="ip-chain.pem", entry="::1"),
    Ev("name-ipv6-bracketed-host", host("::1", trust=TA), ALLOW, host="[::1]", chain="ip-chain.pem", entry="::1"),
    Ev("name-ipv6-bracketed-pattern", host("[::1]", trust=TA), ALLOW, host="::1", chain="ip-chain.pem", entry="::1"),
    Ev("name-ipv6-noncanonical-host", host("::1", trust=TA), ALLOW, host="0:0:0:0:0:0:0:1", chain="ip-chain.pem", entry="::1"),
    Ev("name-ipv4-mismatch", D, refuse("hostname-mismatch"), host="127.0.0.2", chain="ip-chain.pem"),
    Ev("name-ip-host-dns-cert", D, refuse("hostname-mismatch"), host="127.0.0.1"),
    Ev("name-dns-host-ip-cert", D, refuse("hostname-mismatch"), chain="ip-chain.pem"),
    Ev("name-validate-host-false", host("api.test", trust=TA, validate_host=False, **pk(spki("other"), X)), ALLOW,
       chain="other-chain.pem", matched=spki("other")),
    Ev("name-validate-host-false-pins-still-checked", host("api.test", trust=TA, validate_host=False, **pk(spki("api"), X)),
       refuse("pin-mismatch"), chain="other-chain.pem"),
)


@pytest.mark.parametrize("c", NAMES)
def test_names(ws, c):
    evaluate_case(ws, c)


def _custom_chain(ws, name: str, leaf: pkilib.Issued, *chain: pkilib.Issued) -> str:
    pkilib.write_pem(ws.path(name), leaf.cert, *(c.cert for c in chain))
    return name


def test_name_no_partial_wildcards(ws):
    int_a = ws.pki.issued("int-a")
    leaf = pkilib.make_leaf("w*.api.test", int_a, san_dns=["w*.api.test"])
    chain = _custom_chain(ws, "partial-wild-chain.pem", leaf, int_a)
    evaluate_case(ws, Ev("partial", D, refuse("hostname-mismatch"), host="www.api.test", chain=chain))


def test_name_ip_host_needs_ip_san(ws):
    int_a = ws.pki.issued("int-a")
    leaf = pkilib.make_leaf("127.0.0.1", int_a, san_dns=["127.0.0.1"])  # an IP written as a DNS name
    chain = _custom_chain(ws, "ip-as-dns-chain.pem", leaf, int_a)
    evaluate_case(ws, Ev("ip-as-dns", D, refuse("hostname-mismatch"), host="127.0.0.1", chain=chain))


@pytest.mark.parametrize("permitted,expect", [("api.test", ALLOW), ("other.test", refuse("untrusted-chain"))])
def test_name_constraints_are_enforced(ws, permitted, expect):
    root_a = ws.pki.issued("root-a")
    ca = pkilib.make_intermediate("pinproxy constrained CA", root_a, name_constraints={"permitted_dns": [permitted]})
    leaf = pkilib.make_leaf("api.test", ca, san_dns=["api.test"])
    chain = _custom_chain(ws, "constrained-chain.pem", leaf, ca)
    evaluate_case(ws, Ev("nc", host("api.test", trust=TA), expect, chain=chain))


# ====================================================================== pins

PINS = cases(
    Ev("pin-spki-leaf", host("api.test", trust=TA, **pk(spki("api"), X)), ALLOW, matched=spki("api")),
    Ev("pin-spki-intermediate", host("api.test", trust=TA, **pk(spki("int-a"), X)), ALLOW, matched=spki("int-a")),
    Ev("pin-spki-root-not-presented", host("api.test", trust=TA, **pk(spki("root-a"), X)), ALLOW, matched=spki("root-a")),
    Ev("pin-spki-second-in-list", host("api.test", trust=TA, **pk(X, spki("api"))), ALLOW, matched=spki("api")),
    Ev("pin-spki-rotated-same-key", host("api.test", trust=TA, **pk(spki("api"), X)), ALLOW, chain="api-rotated-chain.pem"),
    Ev("pin-spki-new-key", host("api.test", trust=TA, **pk(spki("api"), X)), refuse("pin-mismatch"), chain="api-newkey-chain.pem"),
    Ev("pin-spki-rsa", host("api.test", trust=TA, **pk(spki("api-rsa"), X)), ALLOW, chain="api-rsa-chain.pem"),
    Ev("pin-spki-none-match", host("api.test", trust=TA, **pk(X, Y)), refuse("pin-mismatch")),
    Ev("pin-cert-leaf", host("api.test", trust=TA, **cp(certpin("api"), X)), ALLOW, matched=certpin("api")),
    Ev("pin-cert-intermediate", host("api.test", trust=TA, **cp(certpin("int-a"), X)), ALLOW, matched=certpin("int-a")),
    Ev("pin-cert-root-not-presented", host("api.test", trust=TA, **cp(certpin("root-a"), X)), ALLOW),
    Ev("pin-cert-rotated-mismatch", host("api.test", trust=TA, **cp(certpin("api"), X)), refuse("pin-mismatch"),
       chain="api-rotated-chain.pem"),
    Ev("pin-kind-public-key-given-cert-hashes", host("api.test", trust=TA, **pk(certpin("api"), certpin("int-a"))),
       refuse("pin-mismatch")),
    Ev("pin-kind-certificate-given-key-hashes", host("api.test", trust=TA, **cp(spki("api"), spki("int-a"))),
       refuse("pin-mismatch")),
    Ev("pin-certificates-key-rotated", host("api.test", trust=TA, pin="public-key", certificates=["api.pem"]), ALLOW,
       chain="api-rotated-chain.pem"),
    Ev("pin-certificates-key-newkey", host("api.test", trust=TA, pin="public-key", certificates=["api.pem"]),
       refuse("pin-mismatch"), chain="api-newkey-chain.pem"),
    Ev("pin-certificates-cert-same", host("api.test", trust=TA, pin="certificate", certificates=["api.pem"]), ALLOW),
    Ev("pin-certificates-cert-rotated", host("api.test", trust=TA, pin="certificate", certificates=["api.pem"]),
       refuse("pin-mismatch"), chain="api-rotated-chain.pem"),
    Ev("pin-certificates-der", host("api.test", trust=TA, pin="public-key", certificates=["api.der"]), ALLOW),
    Ev("pin-certificates-dir", host("api.test", trust=TA, pin="public-key", certificates=["anchors"]), ALLOW,
       chain="api-newkey-chain.pem"),
    Ev("pin-certificates-intermediate", host("api.test", trust=TA, pin="public-key", certificates=["int-a.pem"]), ALLOW,
       chain="api-newkey-chain.pem"),
    Ev("pin-certificates-and-pins-combined", host("api.test", trust=TA, pin="public-key", pins=[X], certificates=["api.pem"]),
       ALLOW),
    Ev("pin-in-default", default(trust=TA, **pk(spki("api"), X)), ALLOW, entry="default"),
    Ev("pin-in-default-mismatch", default(trust=TA, **pk(spki("api"), X)), refuse("pin-mismatch"), chain="api-newkey-chain.pem"),
    # A presented chain that merely *contains* the pinned int-a, while the leaf chains to int-b.
    Ev("pin-only-on-built-chain-mixed", host("api.test", trust=["root-a.pem", "root-b.pem", "int-b.pem"], **pk(spki("int-a"), X)),
       refuse("pin-mismatch"), chain="mixed-chain.pem"),
    Ev("pin-only-on-built-chain-mixed-full", host("api.test", trust=["root-a.pem", "root-b.pem"], **pk(spki("int-a"), X)),
       refuse("pin-mismatch"), chain="mixed-chain-full.pem"),
    Ev("pin-only-on-built-chain-cert-mode", host("api.test", trust=["root-a.pem", "root-b.pem"], **cp(certpin("int-a"), X)),
       refuse("pin-mismatch"), chain="mixed-chain-full.pem"),
    # mixed-chain.pem without int-b cannot be built at all.
    Ev("pin-mixed-chain-unbuildable", host("api.test", trust=["root-a.pem", "root-b.pem"], **pk(spki("int-a"), X)),
       refuse("untrusted-chain"), chain="mixed-chain.pem", also=("pin-mismatch",)),
    Ev("pin-entry-with-include-subdomains", host("api.test", trust=TA, include_subdomains=True, **pk(spki("api"), X)), ALLOW,
       host="www.api.test", entry="api.test", matched=spki("api")),
    Ev("pin-entry-with-include-subdomains-mismatch", host("api.test", trust=TA, include_subdomains=True, **pk(X, Y)),
       refuse("pin-mismatch"), host="www.api.test", entry="api.test"),
)


@pytest.mark.parametrize("c", PINS)
def test_pins(ws, c):
    evaluate_case(ws, c)


# ====================================================================== trust = "pinned"

PINNED = cases(
    Ev("pinned-leaf", host("api.test", trust="pinned", pin="public-key", certificates=["api.pem"]), ALLOW),
    Ev("pinned-leaf-only-presented", host("api.test", trust="pinned", pin="public-key", certificates=["api.pem"]), ALLOW,
       chain="api.pem"),
    Ev("pinned-leaf-cert-mode", host("api.test", trust="pinned", pin="certificate", certificates=["api.pem"]), ALLOW),
    Ev("pinned-intermediate", host("api.test", trust="pinned", pin="public-key", certificates=["int-a.pem"]), ALLOW),
    Ev("pinned-root", host("api.test", trust="pinned", pin="certificate", certificates=["root-a.pem"]), ALLOW),
    Ev("pinned-dir", host("api.test", trust="pinned", pin="public-key", certificates=["anchors"]), ALLOW),
    Ev("pinned-rotated-same-key-not-an-anchor", host("api.test", trust="pinned", pin="public-key", certificates=["api.pem"]),
       refuse("untrusted-chain"), chain="api-rotated-chain.pem", maybe=("pin-mismatch",)),
    Ev("pinned-new-key", host("api.test", trust="pinned", pin="public-key", certificates=["api.pem"]),
       refuse("untrusted-chain"), chain="api-newkey-chain.pem", also=("pin-mismatch",)),
    Ev("pinned-self-signed", host("self.test", trust="pinned", pin="certificate", certificates=["self.pem"]), ALLOW,
       host="self.test", chain="self.pem"),
    Ev("pinned-self-signed-ip", host("127.0.0.1", trust="pinned", pin="certificate", certificates=["self.pem"]), ALLOW,
       host="127.0.0.1", chain="self.pem"),
    Ev("pinned-self-rekeyed-not-an-anchor", host("self.test", trust="pinned", pin="public-key", certificates=["self.pem"]),
       refuse("untrusted-chain"), host="self.test", chain="self-rekeyed.pem"),
    Ev("pinned-other-hierarchy", host("api.test", trust="pinned", pin="public-key", certificates=["root-a.pem"]),
       refuse("untrusted-chain"), chain="untrusted-chain.pem", also=("pin-mismatch",)),
    Ev("pinned-hostname-still-checked", host("other.test", trust="pinned", pin="public-key", certificates=["int-a.pem"]),
       refuse("hostname-mismatch"), host="other.test"),
    Ev("pinned-time-still-checked", host("api.test", trust="pinned", pin="public-key", certificates=["int-a.pem"]),
       refuse("certificate-expired"), chain="expired-chain.pem"),
)


@pytest.mark.parametrize("c", PINNED)
def test_trust_pinned(ws, c):
    evaluate_case(ws, c)


# ====================================================================== trust = "none"

NONE = cases(
    Ev("none-leaf-key-rekeyed", host("self.test", trust="none", pin="public-key", certificates=["self.pem"]), ALLOW,
       host="self.test", chain="self-rekeyed.pem"),
    Ev("none-leaf-cert", host("self.test", trust="none", pin="certificate", certificates=["self.pem"]), ALLOW,
       host="self.test", chain="self.pem"),
    Ev("none-leaf-cert-rekeyed", host("self.test", trust="none", pin="certificate", certificates=["self.pem"]),
       refuse("pin-mismatch"), host="self.test", chain="self-rekeyed.pem"),
    Ev("none-leaf-pin-ca-issued", host("api.test", trust="none", **pk(spki("api"), X)), ALLOW),
    Ev("none-leaf-pin-unknown-hierarchy", host("api.test", trust="none", **pk(spki("untrusted"), X)), ALLOW,
       chain="untrusted-chain.pem"),
    Ev("none-intermediate-pin-ignored", host("api.test", trust="none", **pk(spki("int-a"), X)), refuse("pin-mismatch")),
    Ev("none-root-pin-ignored", host("api.test", trust="none", **pk(spki("root-a"), X)), refuse("pin-mismatch"),
       chain="api-fullchain.pem"),
    Ev("none-intermediate-cert-pin-ignored", host("api.test", trust="none", **cp(certpin("int-a"), X)), refuse("pin-mismatch")),
    Ev("none-hostname-still-checked", host("other.test", trust="none", **pk(spki("api"), X)), refuse("hostname-mismatch"),
       host="other.test"),
    Ev("none-no-hostname-check", host("api.test", trust="none", validate_host=False, **pk(spki("other"), X)), ALLOW,
       chain="other-chain.pem"),
)


@pytest.mark.parametrize("c", NONE)
def test_trust_none(ws, c):
    evaluate_case(ws, c)


# ====================================================================== actions, ports, enforce

PX = proxy(allow_ports=[443])

ACTIONS = cases(
    Ev("deny", host("api.test", action="deny"), refuse("host-denied"), pins_shown=False, entry="api.test"),
    Ev("deny-default", default(action="deny"), refuse("host-denied"), host="other.test", pins_shown=False, entry="default"),
    Ev("deny-default-entry-overrides", default(action="deny") + host("api.test", trust=TA), ALLOW, entry="api.test"),
    # Report-only: the evaluation goes on past host-denied, so the chain is judged too (the test
    # root is not in the system store), and an untrusted chain is refused even under report-only.
    Ev("deny-report-only", host("api.test", action="deny", enforce=False), refuse("untrusted-chain"), also=("host-denied",)),
    Ev("deny-report-only-trusted", host("api.test", action="deny", enforce=False, trust=TA), would("host-denied")),
    Ev("allow-insecure", host("api.test", action="allow-insecure"), ALLOW, chain="untrusted-chain.pem", pins_shown=False),
    Ev("allow-insecure-no-checks-at-all", host("*.wild.test", action="allow-insecure"), ALLOW, host="a.wild.test",
       chain="expired-chain.pem", pins_shown=False),
    Ev("allow-insecure-ignores-pins-and-revocation", host("api.test", action="allow-insecure"), ALLOW,
       chain="revoked-chain.pem", pins_shown=False),
    Ev("allow-insecure-default", default(action="allow-insecure"), ALLOW, host="other.test", chain="untrusted-chain.pem",
       pins_shown=False),
    Ev("verify-explicit", host("api.test", action="verify", trust=TA), ALLOW),
    # min_tls is handshake-only and mode is always intercept: neither changes an offline verdict.
    Ev("min-tls-not-an-offline-check", host("api.test", trust=TA, min_tls="1.3", mode="intercept"), ALLOW),
)

PORTS = cases(
    Ev("port-default-443-allowed", PX + host("api.test", trust=TA), ALLOW),
    Ev("port-explicit-443", PX + host("api.test", trust=TA), ALLOW, port=443),
    Ev("port-not-allowed", PX + host("api.test", trust=TA), refuse("port-denied"), port=8443, pins_shown=False),
    Ev("port-not-allowed-report-only", PX + host("api.test", trust=TA, enforce=False), would("port-denied"), port=8443,
       pins_shown=False),
    Ev("port-proxy-allow-ports", proxy(allow_ports=[443, 8443]) + host("api.test", trust=TA), ALLOW, port=8443),
    Ev("port-entry-ports", PX + host("api.test", trust=TA, ports=[8443]), ALLOW, port=8443),
    Ev("port-entry-ports-replace-proxy-list", PX + host("api.test", trust=TA, ports=[8443]), refuse("port-denied"), port=443,
       pins_shown=False),
    Ev("port-omitted-means-443", proxy(allow_ports=[8443]) + host("api.test", trust=TA), refuse("port-denied"),
       pins_shown=False),
    Ev("port-omitted-means-443-b", proxy(allow_ports=[8443]) + host("api.test", trust=TA), ALLOW, port=8443),
    Ev("port-default-section", PX + default(trust=TA, ports=[8443]), ALLOW, port=8443),
    Ev("port-default-section-denies", PX + default(trust=TA, ports=[8443]), refuse("port-denied"), port=443, pins_shown=False),
    Ev("port-ipv6-host", PX + host("::1", trust=TA), refuse("port-denied"), host="[::1]", port=8443, chain="ip-chain.pem",
       pins_shown=False),
)

# Report-only relaxes pins, unknown revocation, host and port; the certificate itself is always
# checked (a client behind pinproxy has no check of its own left).
REPORT_ONLY = cases(
    Ev("report-only-pin-mismatch", host("api.test", trust=TA, enforce=False, **pk(X, Y)), would("pin-mismatch")),
    Ev("report-only-untrusted-still-refused", host("api.test", trust=["root-b.pem"], enforce=False), refuse("untrusted-chain")),
    Ev("report-only-expired-still-refused", host("api.test", trust=TA, enforce=False), refuse("certificate-expired"),
       chain="expired-chain.pem"),
    Ev("report-only-not-yet-valid-still-refused", host("api.test", trust=TA, enforce=False), refuse("certificate-not-yet-valid"),
       chain="notyet-chain.pem"),
    Ev("report-only-hostname-still-refused", host("other.test", trust=TA, enforce=False), refuse("hostname-mismatch"),
       host="other.test"),
    Ev("report-only-revoked-still-refused", host("api.test", trust=TA, enforce=False, revocation="crl", crls=["crl-int-a.pem"]),
       refuse("revoked"), chain="revoked-chain.pem"),
    Ev("report-only-revocation-unknown", host("api.test", trust=TA, enforce=False, revocation="ocsp-staple"),
       would("revocation-unknown")),
    Ev("report-only-priority", host("api.test", trust=["root-b.pem"], enforce=False, **pk(X, Y)), refuse("untrusted-chain"),
       also=("pin-mismatch",)),
    Ev("report-only-port-then-expired", PX + host("api.test", trust=TA, enforce=False), refuse("certificate-expired"),
       port=8443, chain="expired-chain.pem", also=("port-denied",)),
    Ev("report-only-mitm-self-signed-expired-other-name", host("*.cdn.test", enforce=False, **pk(X, Y)),
       refuse("untrusted-chain"), host="a.cdn.test", chain="expired-selfsigned.pem",
       maybe=("certificate-expired", "hostname-mismatch", "pin-mismatch")),
    Ev("report-only-default-mitm", default(enforce=False), refuse("untrusted-chain"), host="a.cdn.test",
       chain="expired-selfsigned.pem", maybe=("certificate-expired", "hostname-mismatch")),
    Ev("report-only-in-default", default(trust=TA, enforce=False, **pk(X, Y)), would("pin-mismatch")),
    Ev("report-only-passing-is-plain-allow", host("api.test", trust=TA, enforce=False, **pk(spki("api"), X)), ALLOW),
)


@pytest.mark.parametrize("c", ACTIONS)
def test_actions(ws, c):
    evaluate_case(ws, c)


@pytest.mark.parametrize("c", PORTS)
def test_ports(ws, c):
    evaluate_case(ws, c)


@pytest.mark.parametrize("c", REPORT_ONLY)
def test_report_only(ws, c):
    evaluate_case(ws, c)


# ====================================================================== expires

EXPIRES = cases(
    Ev("expires-passed-pins-ignored", host("api.test", trust=TA, expires=dt.date(2020, 6, 1), **pk(spki("api"), X)), ALLOW,
       chain="api-newkey-chain.pem"),
    Ev("expires-future-pins-enforced", host("api.test", trust=TA, expires=dt.date(2040, 1, 1), **pk(spki("api"), X)),
       refuse("pin-mismatch"), chain="api-newkey-chain.pem"),
    # --at is the evaluation clock, for expires too (the real clock is past 2026-09-01).
    Ev("expires-measured-at-at-before", host("api.test", trust=TA, expires=dt.date(2026, 9, 1), **pk(spki("api"), X)),
       refuse("pin-mismatch"), chain="api-newkey-chain.pem", at="2026-06-01T00:00:00Z"),
    Ev("expires-measured-at-at-after", host("api.test", trust=TA, expires=dt.date(2026, 9, 1), **pk(spki("api"), X)), ALLOW,
       chain="api-newkey-chain.pem", at="2026-10-01T00:00:00Z"),
    Ev("expires-passed-chain-still-checked", host("api.test", trust=["root-b.pem"], expires=dt.date(2020, 6, 1), **pk(spki("api"), X)),
       refuse("untrusted-chain")),
    Ev("expires-passed-host-still-checked", host("api.test", trust=TA, expires=dt.date(2020, 6, 1), **pk(spki("other"), X)),
       refuse("hostname-mismatch"), chain="other-chain.pem"),
    Ev("expires-passed-time-still-checked", host("api.test", trust=TA, expires=dt.date(2020, 6, 1), **pk(X, Y)),
       refuse("certificate-expired"), chain="expired-chain.pem"),
    Ev("expires-in-default", default(trust=TA, expires=dt.date(2020, 6, 1), **pk(X, Y)), ALLOW),
)


@pytest.mark.parametrize("c", EXPIRES)
def test_expires(ws, c):
    evaluate_case(ws, c)


# ====================================================================== revocation


def CRL(*crls, **kw):
    return host("api.test", trust=TA, revocation="crl", crls=list(crls), **kw)


OCSP = host("api.test", trust=TA, revocation="ocsp-staple")

REVOCATION = cases(
    Ev("crl-good", CRL("crl-int-a.pem"), ALLOW),
    Ev("crl-revoked", CRL("crl-int-a.pem"), refuse("revoked"), chain="revoked-chain.pem"),
    Ev("crl-der", CRL("crl-int-a.der"), refuse("revoked"), chain="revoked-chain.pem"),
    Ev("crl-stale", CRL("crl-int-a-stale.pem"), refuse("revocation-unknown")),
    Ev("crl-stale-is-fresh-at-its-time", CRL("crl-int-a-stale.pem"), ALLOW, at="2020-06-01T00:00:00Z"),
    Ev("crl-wrong-issuer", CRL("crl-root-b.pem"), refuse("revocation-unknown")),
    Ev("crl-several-good", CRL("crl-root-b.pem", "crl-int-a.pem"), ALLOW),
    Ev("crl-several-revoked", CRL("crl-root-b.pem", "crl-int-a.pem"), refuse("revoked"), chain="revoked-chain.pem"),
    Ev("crl-rsa-leaf-not-listed", CRL("crl-int-a.pem"), ALLOW, chain="api-rsa-chain.pem"),
    Ev("crl-in-default", default(trust=TA, revocation="crl", crls=["crl-int-a.pem"]), refuse("revoked"), chain="revoked-chain.pem"),
    Ev("revocation-off-explicit", host("api.test", trust=TA, revocation="off"), ALLOW, chain="revoked-chain.pem"),
    Ev("revocation-off-by-default", host("api.test", trust=TA), ALLOW, chain="revoked-chain.pem"),
    Ev("revocation-off-staple-ignored", host("api.test", trust=TA), ALLOW, chain="revoked-chain.pem", staple="ocsp-revoked.der"),
    Ev("ocsp-no-staple", OCSP, refuse("revocation-unknown")),
    Ev("ocsp-good", OCSP, ALLOW, staple="ocsp-api-good.der"),
    Ev("ocsp-revoked", OCSP, refuse("revoked"), chain="revoked-chain.pem", staple="ocsp-revoked.der"),
    Ev("ocsp-stale", OCSP, refuse("revocation-unknown"), staple="ocsp-api-stale.der"),
    Ev("ocsp-good-but-at-after-next-update", OCSP, refuse("revocation-unknown"), staple="ocsp-api-good.der",
       at="2026-08-01T00:00:00Z"),
    Ev("ocsp-staple-for-another-cert", OCSP, refuse("revocation-unknown"), staple="ocsp-revoked.der"),
    Ev("ocsp-good-staple-revoked-chain", OCSP, refuse("revocation-unknown"), chain="revoked-chain.pem",
       staple="ocsp-api-good.der"),
)


@pytest.mark.parametrize("c", REVOCATION)
def test_revocation(ws, c):
    evaluate_case(ws, c)


def _write_ocsp(ws, name, **kw) -> str:
    api = ws.pki.issued("api")
    int_a = ws.pki.issued("int-a")
    kw.setdefault("this_update", dt.datetime(2026, 5, 1, tzinfo=UTC))
    kw.setdefault("next_update", dt.datetime(2026, 7, 1, tzinfo=UTC))
    resp = pkilib.make_ocsp(api, int_a, **kw)
    ws.write(name, pkilib.to_der(resp))
    return name


def test_ocsp_status_unknown(ws):
    staple = _write_ocsp(ws, "ocsp-unknown.der", status="unknown")
    evaluate_case(ws, Ev("u", OCSP, refuse("revocation-unknown"), staple=staple))


def test_ocsp_signed_by_wrong_key(ws):
    staple = _write_ocsp(ws, "ocsp-badsig.der", status="good", signer=ws.pki.issued("int-b"))
    evaluate_case(ws, Ev("b", OCSP, refuse("revocation-unknown"), staple=staple))


def test_ocsp_good_with_signer_certificate_included(ws):
    staple = _write_ocsp(ws, "ocsp-good-certs.der", status="good", include_signer_cert=True)
    evaluate_case(ws, Ev("g", OCSP, ALLOW, staple=staple))


def test_ocsp_garbage_staple_is_not_good(ws):
    ws.write("garbage.der", b"\x30\x03\x0a\x01\x00")  # OCSPResponse{status: successful} without body
    res = ws.evaluate(ws.config(OCSP), "api.test", "api-chain.pem", staple="garbage.der")
    assert res.first != ALLOW, res


# ====================================================================== priority

PRIORITY = cases(
    Ev("prio-untrusted-over-expired", host("api.test", trust=["root-b.pem"]), refuse("untrusted-chain"),
       chain="expired-chain.pem", also=("certificate-expired",)),
    Ev("prio-expired-over-hostname", D, refuse("certificate-expired"), host="other.test", chain="expired-chain.pem",
       also=("hostname-mismatch",)),
    Ev("prio-not-yet-valid-over-hostname", D, refuse("certificate-not-yet-valid"), host="other.test", chain="notyet-chain.pem",
       also=("hostname-mismatch",)),
    Ev("prio-not-yet-valid-over-revocation-unknown", CRL("crl-int-a-stale.pem"), refuse("certificate-not-yet-valid"),
       chain="notyet-chain.pem", also=("revocation-unknown",)),
    Ev("prio-revoked-over-hostname", host("other.test", trust=TA, revocation="crl", crls=["crl-int-a.pem"]), refuse("revoked"),
       host="other.test", chain="revoked-chain.pem", also=("hostname-mismatch",)),
    Ev("prio-revoked-over-pin", CRL("crl-int-a.pem", **pk(X, Y)), refuse("revoked"), chain="revoked-chain.pem",
       also=("pin-mismatch",)),
    Ev("prio-revocation-unknown-over-hostname", host("other.test", trust=TA, revocation="ocsp-staple"),
       refuse("revocation-unknown"), host="other.test", also=("hostname-mismatch",)),
    Ev("prio-revocation-unknown-over-pin", host("api.test", trust=TA, revocation="ocsp-staple", **pk(X, Y)),
       refuse("revocation-unknown"), also=("pin-mismatch",)),
    Ev("prio-hostname-over-pin", host("api.test", trust=TA, **pk(spki("api"), X)), refuse("hostname-mismatch"),
       chain="other-chain.pem", also=("pin-mismatch",)),
    Ev("prio-untrusted-over-pin", host("api.test", trust=TA, **pk(spki("api"), X)), refuse("untrusted-chain"),
       chain="untrusted-chain.pem", also=("pin-mismatch",)),
    Ev("prio-untrusted-over-hostname", default(trust=TA), refuse("untrusted-chain"), host="other.test",
       chain="untrusted-chain.pem", also=("hostname-mismatch",)),
    Ev("prio-all-at-once", host("other.test", trust=["root-b.pem"], **pk(spki("api"), X)), refuse("untrusted-chain"),
       host="other.test", chain="expired-chain.pem", also=("certificate-expired", "hostname-mismatch", "pin-mismatch")),
)


@pytest.mark.parametrize("c", PRIORITY)
def test_priority(ws, c):
    evaluate_case(ws, c)


def test_priority_expired_over_not_yet_valid(ws):
    root_a = ws.pki.issued("root-a")
    future_ca = pkilib.make_intermediate("pinproxy future CA", root_a,
                                         not_before=dt.datetime(2090, 1, 1, tzinfo=UTC),
                                         not_after=dt.datetime(2095, 1, 1, tzinfo=UTC))
    old_leaf = pkilib.make_leaf("api.test", future_ca, san_dns=["api.test"],
                                not_before=dt.datetime(2010, 1, 1, tzinfo=UTC),
                                not_after=dt.datetime(2015, 1, 1, tzinfo=UTC))
    chain = _custom_chain(ws, "expired-under-future.pem", old_leaf, future_ca)
    evaluate_case(ws, Ev("e", host("api.test", trust=TA), refuse("certificate-expired"), chain=chain,
                         also=("certificate-not-yet-valid",)))


def test_priority_not_yet_valid_over_revoked(ws):
    notyet = ws.pki.issued("notyet")
    crl = pkilib.make_crl(ws.pki.issued("int-a"), [notyet.serial])
    pkilib.write_pem(ws.path("crl-notyet.pem"), crl)
    evaluate_case(ws, Ev("n", CRL("crl-notyet.pem"), refuse("certificate-not-yet-valid"), chain="notyet-chain.pem",
                         also=("revoked",)))


def test_priority_expired_over_revoked(ws):
    expired = ws.pki.issued("expired")
    crl = pkilib.make_crl(ws.pki.issued("int-a"), [expired.serial])
    pkilib.write_pem(ws.path("crl-expired.pem"), crl)
    evaluate_case(ws, Ev("x", CRL("crl-expired.pem"), refuse("certificate-expired"), chain="expired-chain.pem",
                         also=("revoked",)))


def test_expired_intermediate(ws):
    root_a = ws.pki.issued("root-a")
    old_ca = pkilib.make_intermediate("pinproxy old CA", root_a, not_after=dt.datetime(2025, 1, 1, tzinfo=UTC))
    leaf = pkilib.make_leaf("api.test", old_ca, san_dns=["api.test"])
    chain = _custom_chain(ws, "old-ca-chain.pem", leaf, old_ca)
    evaluate_case(ws, Ev("i", host("api.test", trust=TA), refuse("certificate-expired"), chain=chain))


# ====================================================================== host patterns and precedence

DENY = default(action="deny")


def ins(pattern: str, **kw) -> str:
    return host(pattern, action="allow-insecure", **kw)


def den(pattern: str, **kw) -> str:
    return host(pattern, action="deny", **kw)


P = dict(pins_shown=False)

PRECEDENCE = cases(
    Ev("exact-over-wildcard", den("*.api.test") + ins("www.api.test"), ALLOW, host="www.api.test", entry="www.api.test", **P),
    Ev("exact-over-wildcard-order", ins("www.api.test") + den("*.api.test"), ALLOW, host="www.api.test", **P),
    Ev("wildcard-other-name", den("*.api.test") + ins("www.api.test"), refuse("host-denied"), host="x.api.test",
       entry="*.api.test", **P),
    Ev("wildcard-over-include-subdomains", ins("api.test", include_subdomains=True) + den("*.api.test"), refuse("host-denied"),
       host="www.api.test", entry="*.api.test", **P),
    Ev("wildcard-over-include-subdomains-order", den("*.api.test") + ins("api.test", include_subdomains=True),
       refuse("host-denied"), host="www.api.test", **P),
    Ev("include-subdomains-matches-the-name-itself", ins("api.test", include_subdomains=True) + den("*.api.test"), ALLOW,
       host="api.test", **P),
    Ev("include-subdomains-reaches-deeper-than-wildcard", ins("api.test", include_subdomains=True) + den("*.api.test"), ALLOW,
       host="a.b.api.test", **P),
    Ev("include-subdomains-longest-suffix", den("api.test", include_subdomains=True) + ins("b.api.test", include_subdomains=True),
       ALLOW, host="a.b.api.test", entry="b.api.test", **P),
    Ev("include-subdomains-longest-suffix-order", ins("b.api.test", include_subdomains=True) + den("api.test", include_subdomains=True),
       ALLOW, host="a.b.api.test", **P),
    Ev("include-subdomains-shorter-suffix", den("api.test", include_subdomains=True) + ins("b.api.test", include_subdomains=True),
       refuse("host-denied"), host="c.api.test", entry="api.test", **P),
    Ev("include-subdomains-deep", DENY + ins("api.test", include_subdomains=True), ALLOW, host="x.y.z.api.test", **P),
    Ev("include-subdomains-label-boundary", DENY + ins("api.test", include_subdomains=True), refuse("host-denied"),
       host="evilapi.test", entry="default", **P),
    Ev("include-subdomains-off-by-default", DENY + ins("api.test"), refuse("host-denied"), host="www.api.test", entry="default", **P),
    Ev("include-subdomains-false", DENY + ins("api.test", include_subdomains=False), refuse("host-denied"), host="www.api.test", **P),
    Ev("wildcard-exactly-one-label", DENY + ins("*.wild.test"), refuse("host-denied"), host="a.b.wild.test", **P),
    Ev("wildcard-not-apex", DENY + ins("*.wild.test"), refuse("host-denied"), host="wild.test", **P),
    Ev("wildcard-match", DENY + ins("*.wild.test"), ALLOW, host="a.wild.test", **P),
    Ev("default-fallback", default(action="allow-insecure") + den("api.test"), ALLOW, host="other.test", **P),
    Ev("pattern-normalised", DENY + ins("API.Test."), ALLOW, host="api.test", **P),
    Ev("host-normalised", DENY + ins("api.test"), ALLOW, host="API.TEST.", **P),
    Ev("wildcard-pattern-normalised", DENY + ins("*.Wild.Test."), ALLOW, host="A.wild.test", **P),
    Ev("ipv4-exact", DENY + ins("127.0.0.1"), ALLOW, host="127.0.0.1", **P),
    Ev("ipv4-other", DENY + ins("127.0.0.1"), refuse("host-denied"), host="127.0.0.2", **P),
    Ev("ipv6-canonical-pattern", DENY + ins("[0:0::1]"), ALLOW, host="::1", **P),
    Ev("ipv6-bracketed-host", DENY + ins("::1"), ALLOW, host="[::1]", **P),
    Ev("ipv6-expanded-host", DENY + ins("2001:db8::1"), ALLOW, host="2001:0db8:0000:0000:0000:0000:0000:0001", **P),
    Ev("ipv6-uppercase-host", DENY + ins("2001:db8::abcd"), ALLOW, host="2001:DB8::ABCD", **P),
)


@pytest.mark.parametrize("c", PRECEDENCE)
def test_precedence(ws, c):
    evaluate_case(ws, c)


# ====================================================================== usage and config errors -> exit 2


def test_exit2_invalid_config(ws):
    cfg = ws.config('[hosts."api.test"]\nfrobnicate = 1\n')
    res = ws.evaluate(cfg, "api.test", "api-chain.pem")
    assert res.code == 2, res


def test_exit2_config_semantic_error(ws):
    cfg = ws.config('[hosts."api.test"]\ntrust = "none"\n')
    res = ws.evaluate(cfg, "api.test", "api-chain.pem")
    assert res.code == 2, res


def test_exit2_missing_config_file(ws):
    res = ws.evaluate(ws.path("nope.toml"), "api.test", "api-chain.pem")
    assert res.code == 2, res


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--chain", "{d}/api-chain.pem"], id="no-host"),
        pytest.param(["--host", "api.test"], id="no-chain"),
        pytest.param(["--host", "api.test", "--chain", "{d}/missing.pem"], id="chain-missing"),
        pytest.param(["--host", "api.test", "--chain", "{d}/garbage.pem"], id="chain-garbage"),
        pytest.param(["--host", "api.test", "--chain", "{d}/api.key"], id="chain-has-no-certificate"),
        pytest.param(["--host", "api.test", "--chain", "{d}/api-chain.pem", "--at", "yesterday"], id="bad-at"),
        pytest.param(["--host", "api.test", "--chain", "{d}/api-chain.pem", "--at", "2026-13-01T00:00:00Z"], id="bad-at-month"),
        pytest.param(["--host", "api.test", "--chain", "{d}/api-chain.pem", "--port", "https"], id="bad-port-word"),
        pytest.param(["--host", "api.test", "--chain", "{d}/api-chain.pem", "--port", "70000"], id="bad-port-range"),
        pytest.param(["--host", "api.test", "--chain", "{d}/api-chain.pem", "--staple", "{d}/missing.der"], id="staple-missing"),
        pytest.param(["--host", "api.test", "--chain", "{d}/api-chain.pem", "--bogus-flag"], id="unknown-flag"),
    ],
)
def test_exit2_usage(ws, args):
    ws.write("garbage.pem", b"garbage\n")
    cfg = ws.config(host("api.test", trust=TA, revocation="ocsp-staple"))
    res = ws.run("evaluate", "--config", cfg, *[a.replace("{d}", str(ws.dir)) for a in args])
    assert res.code == 2, res


def test_relative_paths_resolve_against_config_dir(ws):
    # cwd is an unrelated directory; the config names root-a.pem relative to itself.
    cfg = ws.config(host("api.test", trust=TA), name="conf/pinproxy.toml")
    ws.write("conf/root-a.pem", ws.path("root-a.pem").read_bytes())
    res = ws.evaluate(cfg, "api.test", "api-chain.pem")
    assert res.first == ALLOW, res
    assert res.code == 0, res
