"""`pinproxy check --config FILE`: validity, errors (FILE:LINE on stderr, exit 1),
warnings (FILE:LINE: warning: on stdout, exit 0).

Configs mark the lines a diagnostic may point at with a trailing comment `# @tag`.
For every expected tag at least one diagnostic must point at one of its lines, and
every diagnostic must point at some tagged line.  Where the contract leaves open
whether an entry-level problem points at the entry's header or at the offending
key, both lines carry the tag (see README.md, "Ambiguities").
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import textwrap
from dataclasses import dataclass, field

import pytest

from conftest import PIN_X, PIN_Y, diagnostics, pkilib, tagged_lines

P1, P2 = PIN_X, PIN_Y


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def _digest_with_plus_and_slash() -> bytes:
    for i in range(1000):
        d = hashlib.sha256(str(i).encode()).digest()
        s = _b64(d)
        if "+" in s and "/" in s:
            return d
    raise AssertionError


_D = _digest_with_plus_and_slash()
MALFORMED_PINS = {
    "sha1-prefix": "sha1/" + _b64(hashlib.sha1(b"x").digest()),
    "uppercase-prefix": "SHA256/" + _b64(_D),
    "colon-prefix": "sha256:" + _b64(_D),
    "no-prefix": _b64(_D),
    "unpadded": "sha256/" + _b64(_D).rstrip("="),
    "base64url": "sha256/" + _b64(_D).replace("+", "-").replace("/", "_"),
    "31-bytes": "sha256/" + _b64(b"\x01" * 31),
    "33-bytes": "sha256/" + _b64(b"\x01" * 33),
    "48-bytes": "sha256/" + _b64(b"\x01" * 48),
    "bad-char": "sha256/" + "!" + _b64(_D)[1:],
    "trailing-space": "sha256/" + _b64(_D) + " ",
    "empty": "",
    "prefix-only": "sha256/",
}


@dataclass
class Case:
    id: str
    text: str
    expect: list[str]  # tags that must be hit
    optional: list[str] = field(default_factory=list)  # tags that may be hit
    files: dict[str, bytes] = field(default_factory=dict)  # extra files next to the config


def run_check(ws, text: str, files=None, name="pinproxy.toml"):
    text = textwrap.dedent(text)
    for fname, data in (files or {}).items():
        ws.write(fname, data)
    cfg = ws.config(text, name=name)
    return cfg, tagged_lines(text), ws.check(cfg)


def assert_diags(res, cfg, tags, expect, optional, warning: bool):
    stream = res.out if warning else res.err
    diags = [d for d in diagnostics(stream, str(cfg)) if d.warning == warning]
    got = {d.line for d in diags}
    allowed = set()
    for t in expect + optional:
        assert t in tags, f"test bug: tag @{t} not in the config"
        allowed |= tags[t]
    for t in expect:
        assert got & tags[t], f"expected a {'warning' if warning else 'error'} at line(s) {sorted(tags[t])} (@{t}); got {sorted(got)}\n{res}"
    stray = got - allowed
    assert not stray, f"diagnostics at unexpected line(s) {sorted(stray)}\n{res}"


def assert_valid(res, cfg):
    assert res.code == 0, res
    errs = [d for d in diagnostics(res.err, str(cfg)) if not d.warning]
    assert not errs, res
    assert res.out.strip(), f"check printed no summary\n{res}"


# ====================================================================== valid

A = '["root-a.pem"]'

VALID = {
    "empty-file": "",
    "comments-only": "# nothing here\n\n# at all\n",
    "proxy-only": """
        [proxy]
        listen = ["127.0.0.1:3128", "[::1]:3128"]
        allow_ports = [443, 8443]
        block_private_destinations = false
        """,
    "resolve": """
        [resolve]
        "api.test" = "127.0.0.1"
        "v6.test" = "::1"
        """,
    "default-verify-system": """
        [default]
        action = "verify"
        trust = "system"
        """,
    "default-deny": """
        [default]
        action = "deny"
        """,
    "issue-example": f"""
        [proxy]
        listen = ["127.0.0.1:3128"]
        allow_ports = [443]
        block_private_destinations = true
        [resolve]
        "api.test" = "127.0.0.1"
        [default]
        action = "verify"      # "verify" | "deny"
        trust = "system"
        [hosts."api.example.com"]
        pin = "public-key"
        pins = ["{P1}", "{P2}"]
        """,
    "every-key": f"""
        [proxy]
        listen = ["127.0.0.1:3128"]
        allow_ports = [443, 8443]
        block_private_destinations = true
        [resolve]
        "api.test" = "127.0.0.1"
        [default]
        action = "verify"
        trust = "system"
        validate_host = true
        pin = "none"
        enforce = true
        include_subdomains = false
        ports = [443]
        min_tls = "1.2"
        mode = "intercept"
        revocation = "off"
        [hosts."api.test"]
        action = "verify"
        trust = ["root-a.pem", "anchors", "anchors-mixed"]
        validate_host = true
        pin = "public-key"
        pins = ["{P1}", "{P2}"]
        certificates = ["api.pem", "api-chain.pem", "anchors"]
        enforce = true
        expires = 2040-01-01
        include_subdomains = true
        ports = [443, 8443]
        min_tls = "1.3"
        mode = "intercept"
        revocation = "crl"
        crls = ["crl-int-a.pem", "crl-int-a.der"]
        """,
    "pins-multiline-array": f"""
        [hosts."api.test"]
        trust = {A}
        pin = "certificate"
        pins = [
          "{P1}",  # primary
          "{P2}",  # backup
        ]
        """,
    "certificates-only-public-key": """
        [hosts."api.test"]
        trust = ["root-a.pem"]
        pin = "public-key"
        certificates = ["api-chain.pem"]
        """,
    "certificates-only-certificate": """
        [hosts."api.test"]
        trust = ["root-a.pem"]
        pin = "certificate"
        certificates = ["api.pem", "int-a.pem"]
        """,
    "certificates-der-and-dir": """
        [hosts."api.test"]
        trust = ["anchors-mixed"]
        pin = "public-key"
        certificates = ["api.der", "anchors-mixed"]
        """,
    "trust-pinned": """
        [hosts."api.test"]
        trust = "pinned"
        pin = "certificate"
        certificates = ["api.pem", "int-a.pem"]
        """,
    "trust-none-with-pins": f"""
        [hosts."self.test"]
        trust = "none"
        pin = "public-key"
        pins = ["{P1}", "{P2}"]
        """,
    "trust-none-with-certificates": """
        [hosts."self.test"]
        trust = "none"
        pin = "certificate"
        certificates = ["self.pem", "self-rekeyed.pem"]
        """,
    "validate-host-false-with-pins": f"""
        [hosts."api.test"]
        trust = ["root-a.pem"]
        validate_host = false
        pin = "public-key"
        pins = ["{P1}", "{P2}"]
        """,
    "enforce-false": f"""
        [hosts."api.test"]
        trust = ["root-a.pem"]
        pin = "public-key"
        pins = ["{P1}", "{P2}"]
        enforce = false
        """,
    "expires-future-with-ca-trust": f"""
        [hosts."api.test"]
        trust = ["root-a.pem"]
        pin = "public-key"
        pins = ["{P1}", "{P2}"]
        expires = 2040-06-30
        """,
    "deny": """
        [hosts."blocked.test"]
        action = "deny"
        """,
    "report-bounds": """
        [proxy]
        report_to = ["file:reports.jsonl"]
        report_rate_limit = 1
        report_file_max_bytes = 1
        """,
    "revocation-crl": """
        [hosts."api.test"]
        trust = ["root-a.pem"]
        revocation = "crl"
        crls = ["crl-int-a.pem", "crl-int-a-stale.pem", "crl-root-b.pem", "crl-int-a.der"]
        """,
    "revocation-ocsp-staple": """
        [hosts."api.test"]
        trust = ["root-a.pem"]
        revocation = "ocsp-staple"
        """,
    "min-tls-values": """
        [hosts."a.test"]
        min_tls = "1.2"
        [hosts."b.test"]
        min_tls = "1.3"
        """,
    "patterns": """
        [hosts."api.test"]
        [hosts."API.Other.test."]
        [hosts."*.wild.test"]
        [hosts."localhost"]
        [hosts."a-b.test"]
        [hosts."1password.test"]
        [hosts."xn--bcher-kva.test"]
        [hosts."127.0.0.1"]
        [hosts."::1"]
        [hosts."[2001:db8::1]"]
        [hosts."10.1.2.3"]
        """,
    "include-subdomains-nested": """
        [hosts."example.test"]
        include_subdomains = true
        action = "deny"
        [hosts."api.example.test"]
        include_subdomains = true
        [hosts."*.example.test"]
        """,
    "two-wildcards-distinct": """
        [hosts."*.a.test"]
        [hosts."*.b.a.test"]
        """,
    "anchors-dir-with-trailing-slash": """
        [hosts."api.test"]
        trust = ["anchors/"]
        """,
    "subdir-relative": """
        [hosts."api.test"]
        trust = ["./anchors/root-a.pem", "anchors/../root-b.pem"]
        """,
}


@pytest.mark.parametrize("text", VALID.values(), ids=VALID.keys())
def test_valid_config(ws, text):
    cfg, tags, res = run_check(ws, text)
    assert_valid(res, cfg)
    warns = [d for d in diagnostics(res.out, str(cfg)) if d.warning]
    assert not warns, f"unexpected warnings\n{res}"


def test_empty_file_is_valid(ws):
    cfg = ws.write("empty.toml", b"")
    res = ws.check(cfg)
    assert res.code == 0, res


def test_paths_relative_to_config_dir_not_cwd(ws):
    # The config lives in sub/; root-a.pem exists in sub/ only; cwd is elsewhere.
    ws.write("sub/only-here.pem", ws.path("root-a.pem").read_bytes())
    cfg = ws.config('[hosts."api.test"]\ntrust = ["only-here.pem"]\n', name="sub/pinproxy.toml")
    res = ws.check(cfg)
    assert_valid(res, cfg)
    # ...and a file present only in the cwd is not found.
    cfg2 = ws.config('[hosts."api.test"]\ntrust = ["root-a.pem"]  # @a\n', name="sub/other.toml")
    res = ws.run("check", "--config", cfg2, cwd=ws.dir)  # root-a.pem is in cwd, not in sub/
    assert res.code == 1, res
    assert_diags(res, cfg2, {"a": {2}}, ["a"], [], warning=False)


def test_file_is_reported_as_given_relative(ws):
    ws.config('[hosts."api.test"]\nfrobnicate = true\n', name="rel/pp.toml")
    res = ws.run("check", "--config", "rel/pp.toml", cwd=ws.dir)
    assert res.code == 1, res
    assert_diags(res, "rel/pp.toml", {"a": {2}}, ["a"], [], warning=False)


def test_missing_config_file(ws):
    p = ws.path("does-not-exist.toml")
    res = ws.check(p)
    assert res.code != 0, res
    assert str(p) in res.err, res


# ====================================================================== errors

ERRORS: list[Case] = [
    # --- trust / validate_host without pins
    Case("trust-none-without-pins", """
        [hosts."api.test"]  # @a
        trust = "none"      # @a
        """, ["a"]),
    Case("trust-none-without-pins-in-default", """
        [default]       # @a
        trust = "none"  # @a
        """, ["a"]),
    Case("trust-none-pin-set-no-pins", """
        [hosts."api.test"]  # @a
        trust = "none"      # @a
        pin = "public-key"  # @a
        """, ["a"]),
    Case("validate-host-false-without-pins", """
        [hosts."api.test"]      # @a
        trust = ["root-a.pem"]
        validate_host = false   # @a
        """, ["a"]),
    # --- report-only where the pins are the only protection
    Case("enforce-false-with-trust-none", f"""
        [hosts."self.test"]  # @a
        trust = "none"       # @a
        pin = "public-key"
        pins = ["{P1}", "{P2}"]
        enforce = false      # @a
        """, ["a"]),
    Case("enforce-false-with-validate-host-false", f"""
        [default]              # @a
        validate_host = false  # @a
        pin = "public-key"
        pins = ["{P1}", "{P2}"]
        enforce = false        # @a
        """, ["a"]),
    # --- pin without pins
    Case("pin-public-key-without-pins", """
        [hosts."api.test"]  # @a
        trust = ["root-a.pem"]
        pin = "public-key"  # @a
        """, ["a"]),
    Case("pin-certificate-without-pins", """
        [hosts."api.test"]   # @a
        trust = ["root-a.pem"]
        pin = "certificate"  # @a
        """, ["a"]),
    Case("pin-empty-pins-list", """
        [hosts."api.test"]  # @a
        trust = ["root-a.pem"]
        pin = "public-key"  # @a
        pins = []           # @a
        """, ["a"]),
    Case("pin-without-pins-in-default", """
        [default]           # @a
        pin = "public-key"  # @a
        """, ["a"]),
    # --- pins / certificates with pin = none
    Case("pins-with-pin-none", f"""
        [hosts."api.test"]  # @a
        trust = ["root-a.pem"]
        pin = "none"        # @a
        pins = ["{P1}", "{P2}"]  # @a
        """, ["a"]),
    Case("pins-without-pin-key", f"""
        [hosts."api.test"]  # @a
        trust = ["root-a.pem"]
        pins = ["{P1}", "{P2}"]  # @a
        """, ["a"]),
    Case("certificates-with-pin-none", """
        [hosts."api.test"]  # @a
        trust = ["root-a.pem"]
        pin = "none"        # @a
        certificates = ["api.pem", "int-a.pem"]  # @a
        """, ["a"]),
    # --- trust pinned without certificates
    Case("trust-pinned-without-certificates", f"""
        [hosts."api.test"]  # @a
        trust = "pinned"    # @a
        pin = "public-key"
        pins = ["{P1}", "{P2}"]
        """, ["a"]),
    Case("trust-pinned-nothing-else", """
        [hosts."api.test"]  # @a
        trust = "pinned"    # @a
        """, ["a"], optional=[]),
    # --- expires where chain trust is not CA-based
    Case("expires-with-trust-pinned", """
        [hosts."api.test"]   # @a
        trust = "pinned"     # @a
        pin = "certificate"
        certificates = ["api.pem", "int-a.pem"]
        expires = 2040-01-01 # @a
        """, ["a"]),
    Case("expires-with-trust-none", f"""
        [hosts."api.test"]   # @a
        trust = "none"       # @a
        pin = "public-key"
        pins = ["{P1}", "{P2}"]
        expires = 2040-01-01 # @a
        """, ["a"]),
    Case("expires-with-validate-host-false", f"""
        [hosts."api.test"]     # @a
        trust = ["root-a.pem"]
        validate_host = false  # @a
        pin = "public-key"
        pins = ["{P1}", "{P2}"]
        expires = 2040-01-01   # @a
        """, ["a"]),
    # --- revocation / crls
    Case("revocation-crl-without-crls", """
        [hosts."api.test"]   # @a
        trust = ["root-a.pem"]
        revocation = "crl"   # @a
        """, ["a"]),
    Case("crls-without-revocation", """
        [hosts."api.test"]   # @a
        trust = ["root-a.pem"]
        crls = ["crl-int-a.pem"]  # @a
        """, ["a"]),
    Case("crls-with-revocation-off", """
        [hosts."api.test"]   # @a
        trust = ["root-a.pem"]
        revocation = "off"   # @a
        crls = ["crl-int-a.pem"]  # @a
        """, ["a"]),
    Case("crls-with-revocation-ocsp-staple", """
        [hosts."api.test"]   # @a
        trust = ["root-a.pem"]
        revocation = "ocsp-staple"  # @a
        crls = ["crl-int-a.pem"]    # @a
        """, ["a"]),
    # --- mode
    Case("mode-tunnel-with-pins", f"""
        [hosts."api.test"]
        mode = "tunnel"
        pin = "public-key"
        pins = ["{P1}"]  # @a
        """, ["a"]),
    Case("mode-tunnel-in-default", """
        [default]
        mode = "tunnel"  # @a
        """, ["a"]),
    Case("mode-unknown", """
        [hosts."api.test"]
        mode = "transparent"  # @a
        """, ["a"]),
    # --- unknown keys
    Case("unknown-key-in-host", """
        [hosts."api.test"]
        trust = ["root-a.pem"]
        frobnicate = true  # @a
        """, ["a"]),
    Case("unknown-key-in-default", """
        [default]
        action = "verify"
        pinz = []  # @a
        """, ["a"]),
    Case("unknown-key-in-proxy", """
        [proxy]
        listen = ["127.0.0.1:3128"]
        listen_on = ["127.0.0.1:3129"]  # @a
        """, ["a"]),
    Case("proxy-key-in-host", """
        [hosts."api.test"]
        allow_ports = [443]  # @a
        """, ["a"]),
    Case("unknown-top-level-key", """
        verbose = true  # @a
        [proxy]
        allow_ports = [443]
        """, ["a"]),
    Case("unknown-top-level-table", """
        [proxy]
        allow_ports = [443]
        [logging]  # @a
        """, ["a"]),
    Case("misspelled-hosts-table", """
        [host."api.test"]  # @a
        """, ["a"]),
    # --- wrong types
    *[
        Case(f"wrong-type-{key}-{label}", f"""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            {key} = {value}  # @a
            """, ["a"])
        for key, label, value in [
            ("enforce", "string", '"yes"'),
            ("validate_host", "string", '"true"'),
            ("include_subdomains", "int", "1"),
            ("ports", "string-items", '["443"]'),
            ("ports", "scalar", "443"),
            ("ports", "out-of-range", "[70000]"),
            ("ports", "negative", "[-1]"),
            ("expires", "string", '"2040-01-01"'),
            ("action", "int", "1"),
            ("action", "unknown", '"permit"'),
            ("min_tls", "float", "1.2"),
            ("min_tls", "old", '"1.1"'),
            ("min_tls", "old10", '"1.0"'),
            ("revocation", "bool", "true"),
            ("revocation", "unknown", '"always"'),
            ("mode", "int", "1"),
        ]
    ],
    Case("wrong-type-trust-int", """
        [hosts."api.test"]
        trust = 5  # @a
        """, ["a"]),
    Case("wrong-type-trust-unknown-word", """
        [hosts."api.test"]
        trust = "everything"  # @a
        """, ["a"]),
    Case("wrong-type-trust-bare-filename", """
        [hosts."api.test"]
        trust = "root-a.pem"  # @a
        """, ["a"]),
    Case("wrong-type-pin-bool", f"""
        [hosts."api.test"]  # @h
        trust = ["root-a.pem"]
        pin = true  # @a
        pins = ["{P1}", "{P2}"]  # @h
        """, ["a"], optional=["h"]),
    Case("wrong-type-pin-unknown", f"""
        [hosts."api.test"]  # @h
        trust = ["root-a.pem"]
        pin = "spki"  # @a
        pins = ["{P1}", "{P2}"]  # @h
        """, ["a"], optional=["h"]),
    Case("wrong-type-pins-string", f"""
        [hosts."api.test"]  # @h
        trust = ["root-a.pem"]
        pin = "public-key"  # @h
        pins = "{P1}"  # @a
        """, ["a"], optional=["h"]),
    Case("wrong-type-pins-int-item", f"""
        [hosts."api.test"]
        trust = ["root-a.pem"]
        pin = "public-key"
        pins = ["{P1}", 5]  # @a
        """, ["a"]),
    Case("wrong-type-certificates-string", """
        [hosts."api.test"]  # @h
        trust = ["root-a.pem"]
        pin = "public-key"  # @h
        certificates = "api.pem"  # @a
        """, ["a"], optional=["h"]),
    Case("wrong-type-crls-string", """
        [hosts."api.test"]  # @h
        trust = ["root-a.pem"]
        revocation = "crl"  # @h
        crls = "crl-int-a.pem"  # @a
        """, ["a"], optional=["h"]),
    Case("wrong-type-default-action", """
        [default]
        action = 1  # @a
        """, ["a"]),
    Case("wrong-type-default-not-a-table", """
        default = "verify"  # @a
        """, ["a"]),
    Case("wrong-type-host-entry-not-a-table", """
        [hosts]
        "api.test" = "verify"  # @a
        """, ["a"]),
    Case("nul-escape-in-host-key", """
        [hosts."a.test"]
        action = "deny"
        [hosts."b.test\\u0000"]  # @a
        action = "deny"
        """, ["a"]),
    Case("nul-byte", """
        [hosts."a.test"]
        action = "deny"\x00  # @a
        [hosts."b.test"]
        action = "deny"
        """, ["a"]),
    Case("wrong-type-proxy-listen-string", """
        [proxy]
        listen = "127.0.0.1:3128"  # @a
        """, ["a"]),
    Case("wrong-type-proxy-allow-ports-item", """
        [proxy]
        allow_ports = [443, "8443"]  # @a
        """, ["a"]),
    Case("wrong-type-proxy-allow-ports-scalar", """
        [proxy]
        allow_ports = 443  # @a
        """, ["a"]),
    Case("wrong-type-proxy-block-private", """
        [proxy]
        block_private_destinations = "yes"  # @a
        """, ["a"]),
    Case("report-rate-limit-zero", """
        [proxy]
        report_rate_limit = 0  # @a
        """, ["a"]),
    Case("report-rate-limit-float", """
        [proxy]
        report_rate_limit = 1.5  # @a
        """, ["a"]),
    Case("report-file-max-bytes-zero", """
        [proxy]
        report_file_max_bytes = 0  # @a
        """, ["a"]),
    Case("report-file-max-bytes-negative", """
        [proxy]
        report_file_max_bytes = -1  # @a
        """, ["a"]),
    Case("report-file-max-bytes-string", """
        [proxy]
        report_file_max_bytes = "64MiB"  # @a
        """, ["a"]),
    Case("wrong-type-resolve-value", """
        [resolve]
        "api.test" = 5  # @a
        """, ["a"]),
    # --- malformed pins
    *[
        Case(f"malformed-pin-{label}", f"""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            pin = "public-key"
            pins = ["{P1}", "{bad}"]  # @a
            """, ["a"])
        for label, bad in MALFORMED_PINS.items()
    ],
    Case("malformed-pin-certificate-mode", f"""
        [hosts."api.test"]
        trust = ["root-a.pem"]
        pin = "certificate"
        pins = ["{MALFORMED_PINS['unpadded']}", "{P2}"]  # @a
        """, ["a"]),
    Case("malformed-pin-in-default", f"""
        [default]
        trust = ["root-a.pem"]
        pin = "public-key"
        pins = ["{P1}", "{MALFORMED_PINS['31-bytes']}"]  # @a
        """, ["a"]),
    # --- files
    Case("missing-certificate-file", """
        [hosts."api.test"]
        trust = ["root-a.pem"]
        pin = "public-key"
        certificates = ["api.pem", "missing.pem"]  # @a
        """, ["a"]),
    Case("garbage-certificate-file", """
        [hosts."api.test"]
        trust = ["root-a.pem"]
        pin = "public-key"
        certificates = ["api.pem", "garbage.pem"]  # @a
        """, ["a"], files={"garbage.pem": b"not a certificate\n"}),
    Case("certificate-file-holding-only-a-key", """
        [hosts."api.test"]
        trust = ["root-a.pem"]
        pin = "public-key"
        certificates = ["api.pem", "api.key"]  # @a
        """, ["a"]),
    Case("missing-anchor-file", """
        [hosts."api.test"]
        trust = ["root-a.pem", "missing-root.pem"]  # @a
        """, ["a"]),
    Case("missing-anchor-dir", """
        [hosts."api.test"]
        trust = ["no-such-dir/"]  # @a
        """, ["a"]),
    Case("garbage-anchor-file", """
        [hosts."api.test"]
        trust = ["garbage.crt"]  # @a
        """, ["a"], files={"garbage.crt": b"\x00\x01\x02garbage"}),
    Case("missing-anchor-in-default", """
        [default]
        trust = ["missing-root.pem"]  # @a
        """, ["a"]),
    Case("missing-crl-file", """
        [hosts."api.test"]
        trust = ["root-a.pem"]
        revocation = "crl"
        crls = ["missing-crl.pem"]  # @a
        """, ["a"]),
    Case("garbage-crl-file", """
        [hosts."api.test"]
        trust = ["root-a.pem"]
        revocation = "crl"
        crls = ["garbage-crl.pem"]  # @a
        """, ["a"], files={"garbage-crl.pem": b"-----BEGIN X509 CRL-----\nnope\n-----END X509 CRL-----\n"}),
    Case("certificate-given-as-crl", """
        [hosts."api.test"]
        trust = ["root-a.pem"]
        revocation = "crl"
        crls = ["api.pem"]  # @a
        """, ["a"]),
    # --- invalid host patterns (header line)
    *[
        Case(f"invalid-pattern-{label}", f"""
            [proxy]
            allow_ports = [443]
            [hosts.{pattern}]  # @a
            action = "deny"
            """, ["a"])
        for label, pattern in [
            ("underscore", '"bad_name.test"'),
            ("space", '"has space.test"'),
            ("double-wildcard", '"*.*.test"'),
            ("inner-wildcard", '"a.*.test"'),
            ("partial-wildcard", '"w*.test"'),
            ("suffix-wildcard", '"*w.test"'),
            ("bare-star", '"*"'),
            ("wildcard-dot-only", '"*."'),
            ("empty", '""'),
            ("empty-label", '"a..test"'),
            ("two-trailing-dots", '"api.test.."'),
            ("non-ascii", '"bücher.test"'),
            ("scheme", '"https://api.test"'),
            ("with-port", '"api.test:443"'),
            ("path", '"api.test/x"'),
            ("unbalanced-bracket", '"[::1"'),
            ("bad-ipv6", '"::g"'),
            ("brackets-around-ipv4", '"[127.0.0.1]"'),
        ]
    ],
    # --- duplicates after normalisation (the later header; the earlier may also be named)
    Case("duplicate-case-and-trailing-dot", """
        [hosts."api.test"]   # @first
        trust = ["root-a.pem"]
        [hosts."API.test."]  # @a
        trust = ["root-a.pem"]
        """, ["a"], optional=["first"]),
    Case("duplicate-wildcard", """
        [hosts."*.wild.test"]   # @first
        [hosts."*.WILD.test."]  # @a
        """, ["a"], optional=["first"]),
    Case("duplicate-ipv6-brackets", """
        [hosts."::1"]    # @first
        [hosts."[::1]"]  # @a
        """, ["a"], optional=["first"]),
    Case("duplicate-ipv6-noncanonical", """
        [hosts."::1"]              # @first
        [hosts."0:0:0:0:0:0:0:1"]  # @a
        """, ["a"], optional=["first"]),
    # --- TOML syntax
    Case("toml-syntax-error", """
        [proxy]
        allow_ports = [443]
        this is not toml  # @a
        """, ["a"]),
    Case("toml-redefined-table", """
        [hosts."api.test"]
        trust = ["root-a.pem"]
        [hosts."api.test"]  # @a
        """, ["a"]),
    Case("toml-duplicate-key", """
        [hosts."api.test"]
        trust = ["root-a.pem"]
        trust = "system"  # @a
        """, ["a"]),
]


@pytest.mark.parametrize("case", ERRORS, ids=[c.id for c in ERRORS])
def test_config_error(ws, case):
    cfg, tags, res = run_check(ws, case.text, case.files)
    assert res.code == 1, res
    assert_diags(res, cfg, tags, case.expect, case.optional, warning=False)


def test_every_problem_is_reported(ws):
    text = f"""\
        [hosts."a.test"]
        trust = ["root-a.pem"]
        frob = 1                  # @a
        [hosts."b.test"]
        trust = ["root-a.pem"]
        enforce = "no"            # @b
        [hosts."bad_name.test"]   # @c
        trust = ["root-a.pem"]
        [hosts."d.test"]          # @d
        trust = "none"            # @d
        [hosts."e.test"]
        trust = ["root-a.pem"]
        pin = "public-key"
        pins = ["{P1}", "sha256/short"]  # @e
        [hosts."f.test"]
        trust = ["root-a.pem"]
        pin = "public-key"
        certificates = ["api.pem", "missing.pem"]  # @f
        [hosts."g.test"]
        mode = "relay"            # @g
        [default]
        action = "allow"          # @h
        """
    cfg, tags, res = run_check(ws, text)
    assert res.code == 1, res
    assert_diags(res, cfg, tags, list("abcdefgh"), [], warning=False)


def test_duplicate_does_not_hide_other_problems(ws):
    # Both spellings are checked in full: the missing file in the first one is still reported.
    text = """\
        [hosts."f.test"]          # @first
        trust = ["root-a.pem"]
        pin = "public-key"
        certificates = ["api.pem", "missing.pem"]  # @f
        [hosts."F.test."]         # @dup
        trust = ["root-a.pem"]
        """
    cfg, tags, res = run_check(ws, text)
    assert res.code == 1, res
    assert_diags(res, cfg, tags, ["f", "dup"], ["first"], warning=False)



# ====================================================================== warnings


def _today() -> dt.date:
    return dt.datetime.now(dt.timezone.utc).date()


def _soon_files(ws, days: int) -> None:
    """soon-leaf.pem (leaf by int-a) and soon-root.pem (root) expiring in DAYS days."""
    now = dt.datetime.now(dt.timezone.utc)
    int_a = ws.pki.issued("int-a")
    leaf = pkilib.make_leaf("api.test", int_a, san_dns=["api.test"],
                            not_before=now - dt.timedelta(days=300), not_after=now + dt.timedelta(days=days))
    root = pkilib.make_root("pinproxy soon root", not_before=now - dt.timedelta(days=300),
                            not_after=now + dt.timedelta(days=days))
    pkilib.write_pem(ws.path("soon-leaf.pem"), leaf.cert)
    pkilib.write_pem(ws.path("soon-root.pem"), root.cert)


def warning_cases():
    t = _today()
    past = t - dt.timedelta(days=1)
    soon = t + dt.timedelta(days=10)
    far = t + dt.timedelta(days=100)
    return [
        # id, text, expected tags, soon-file days (or None)
        ("single-pin", f"""
            [hosts."api.test"]      # @a
            trust = ["root-a.pem"]
            pin = "public-key"      # @a
            pins = ["{P1}"]         # @a
            """, ["a"], None),
        ("single-pin-certificate-mode", f"""
            [hosts."api.test"]      # @a
            trust = ["root-a.pem"]
            pin = "certificate"     # @a
            pins = ["{P1}"]         # @a
            """, ["a"], None),
        ("single-pin-in-default", f"""
            [default]               # @a
            trust = ["root-a.pem"]
            pin = "public-key"      # @a
            pins = ["{P1}"]         # @a
            """, ["a"], None),
        ("expires-passed", f"""
            [hosts."api.test"]      # @a
            trust = ["root-a.pem"]
            pin = "public-key"
            pins = ["{P1}", "{P2}"]
            expires = {past.isoformat()}  # @a
            """, ["a"], None),
        ("expires-long-passed", f"""
            [hosts."api.test"]      # @a
            trust = ["root-a.pem"]
            pin = "public-key"
            pins = ["{P1}", "{P2}"]
            expires = 2020-06-01    # @a
            """, ["a"], None),
        ("expires-within-30-days", f"""
            [hosts."api.test"]      # @a
            trust = ["root-a.pem"]
            pin = "public-key"
            pins = ["{P1}", "{P2}"]
            expires = {soon.isoformat()}  # @a
            """, ["a"], None),
        ("pinned-certificate-expiring", """
            [hosts."api.test"]      # @a
            trust = ["root-a.pem"]
            pin = "public-key"
            certificates = ["soon-leaf.pem", "int-a.pem"]  # @a
            """, ["a"], 10),
        ("anchor-expiring", """
            [hosts."api.test"]      # @a
            trust = ["soon-root.pem", "root-a.pem"]  # @a
            """, ["a"], 10),
        ("anchor-expiring-in-default", """
            [default]               # @a
            trust = ["soon-root.pem"]  # @a
            """, ["a"], 10),
        ("allow-insecure", """
            [hosts."api.test"]         # @a
            action = "allow-insecure"  # @a
            """, ["a"], None),
        ("allow-insecure-in-default", """
            [default]                  # @a
            action = "allow-insecure"  # @a
            """, ["a"], None),
        ("several-warnings", f"""
            [hosts."a.test"]           # @a
            action = "allow-insecure"  # @a
            [hosts."b.test"]           # @b
            trust = ["root-a.pem"]
            pin = "public-key"         # @b
            pins = ["{P1}"]            # @b
            [hosts."c.test"]           # @c
            trust = ["root-a.pem"]
            pin = "public-key"
            pins = ["{P1}", "{P2}"]
            expires = {soon.isoformat()}  # @c
            """, ["a", "b", "c"], None),
    ]


@pytest.mark.parametrize("case", warning_cases(), ids=[c[0] for c in warning_cases()])
def test_config_warning(ws, case):
    _id, text, expect, soon_days = case
    if soon_days is not None:
        _soon_files(ws, soon_days)
    cfg, tags, res = run_check(ws, text)
    assert_valid(res, cfg)
    for d in diagnostics(res.out, str(cfg)):
        assert d.warning, f"non-warning diagnostic on stdout of a valid config: {d}\n{res}"
    assert_diags(res, cfg, tags, expect, [], warning=True)


def no_warning_cases():
    t = _today()
    return [
        ("expires-in-100-days", f"""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            pin = "public-key"
            pins = ["{P1}", "{P2}"]
            expires = {(t + dt.timedelta(days=100)).isoformat()}
            """, None),
        ("pinned-certificate-expiring-in-90-days", """
            [hosts."api.test"]
            trust = ["root-a.pem"]
            pin = "public-key"
            certificates = ["soon-leaf.pem", "int-a.pem"]
            """, 90),
        ("anchor-expiring-in-90-days", """
            [hosts."api.test"]
            trust = ["soon-root.pem", "root-a.pem"]
            """, 90),
        ("deny-is-not-insecure", """
            [hosts."api.test"]
            action = "deny"
            """, None),
    ]


@pytest.mark.parametrize("case", no_warning_cases(), ids=[c[0] for c in no_warning_cases()])
def test_no_warning(ws, case):
    _id, text, soon_days = case
    if soon_days is not None:
        _soon_files(ws, soon_days)
    cfg, tags, res = run_check(ws, text)
    assert_valid(res, cfg)
    warns = [d for d in diagnostics(res.out, str(cfg)) if d.warning]
    assert not warns, res
    assert "warning:" not in res.out + res.err, res


def test_warnings_do_not_go_to_stderr_as_errors(ws):
    cfg, tags, res = run_check(ws, f"""
        [hosts."api.test"]
        action = "allow-insecure"
        """)
    assert res.code == 0, res
    assert not [d for d in diagnostics(res.err, str(cfg)) if not d.warning], res


def test_errors_and_warnings_together_exit_1(ws):
    cfg, tags, res = run_check(ws, """
        [hosts."a.test"]           # @w
        action = "allow-insecure"  # @w
        [hosts."b.test"]
        frobnicate = 1             # @e
        """)
    assert res.code == 1, res
    assert_diags(res, cfg, tags, ["e"], [], warning=False)


@pytest.mark.parametrize("text, line", [
    pytest.param("[proxy]\n[" + ".".join(["a"] * 100_000) + "]\n", 2, id="table-header-100000-parts"),
    pytest.param(".".join(["a"] * 80_000) + " = 1\n", 1, id="dotted-key-80000-parts"),
    pytest.param("[hosts]\n" + ".".join(['"x"'] * 17) + " = 1\n", 2, id="quoted-dotted-key-17-levels"),
    pytest.param("x = " + "{ a = " * 40 + "1" + " }" * 40 + "\n", 1, id="inline-tables-40-deep"),
])
def test_deep_nesting_is_refused_before_parsing(ws, text, line):
    """Such a file crashed `check` (and a reloading daemon) with a stack overflow in toml++."""
    cfg = ws.write("deep.toml", text)
    res = ws.check(cfg)
    assert res.code == 1, res
    assert f"{cfg}:{line}: " in res.err and "deeper than 16 levels" in res.err, res
