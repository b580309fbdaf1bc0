"""`pinproxy suggest`: learn a pin policy from decision lines (trust on first use).

A daemon in report-only mode (`[default] enforce = false`) sees real connections to two
leaves of api.test (two keys behind one name, as behind a load balancer). `suggest` reads
its log (a file, or standard input; logfmt and JSON) and prints a block that pins every key
seen. That block passes `check`, and a daemon running it allows the origins it was learned
from and refuses an attacker leaf from another CA that the entry also trusts.
Lines whose chain was never verified (refusals, allow-insecure) teach nothing, and text from
certificates cannot escape the comments it is printed in.
Only the path OpenSSL verified is learned (`verified_pins`), never what a server merely
presented: an unrelated certificate appended to a chain that verifies, or a pin spelled out in a
certificate's subject, never reaches the block.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

import origin as originlib
import pki as pkilib
from conftest import run
from proxy_harness import (
    API,
    Tunnel,
    expect_refusal,
    make_proxy,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
)


def learn(make_proxy, origins, log_format: str = "logfmt"):
    """A report-only daemon that saw 3 connections to `api` and 1 to `api_newkey`."""
    ports = [origins.api.port, origins.api_newkey.port]
    p = make_proxy(proxy={"allow_ports": ports, "log_format": log_format},
                   default={"trust": ["root-a.pem"], "enforce": False})
    for origin, times in ((origins.api, 3), (origins.api_newkey, 1)):
        for _ in range(times):
            with Tunnel(p, API, origin.port) as t:
                assert t.get("/small") == (200, originlib.SMALL_BODY)
    p.wait_for_log(lambda l: l.get("event") == "connection" and l.get("outcome") == "allowed"
                   and l.get("port") == str(origins.api_newkey.port), what="the last allowed connection")
    return p


def suggest(pinproxy, *args, stdin: str | None = None):
    p = subprocess.run([str(pinproxy), "suggest", *map(str, args)], input=stdin, capture_output=True, text=True,
                       timeout=60)
    return p


def test_suggested_block_allows_what_it_learned_and_refuses_an_attacker(make_proxy, origins, pki, pinproxy):
    learned = learn(make_proxy, origins)
    out = suggest(pinproxy, learned.log_path)
    assert out.returncode == 0, out
    text = out.stdout
    assert f'[hosts."{API}"]' in text, text
    for stem in ("api", "api-newkey", "int-a"):
        assert pki.spki(stem) in text, (stem, text)
    assert pki.spki("root-a") not in text, text  # never presented, so never pinned
    assert "4 verified connection(s)" in text, text
    assert "2 leaf key(s), 1 intermediate key(s)" in text, text
    assert "3 connection(s)" in text and "backup key" in text, text
    assert f"ports = [{min(origins.api.port, origins.api_newkey.port)}, {max(origins.api.port, origins.api_newkey.port)}]" in text

    # The block as printed passes check (one entry, pinned).
    cfg = learned.dir / "suggested.toml"
    cfg.write_text(text)
    checked = run(pinproxy, "check", "--config", cfg)
    assert checked.code == 0, checked
    assert "1 pinned with 3 pins" in checked.out, checked

    # Pasted into a daemon's config, with the trust line of the entry it was learned under
    # plus a second root an attacker could get a certificate from.
    block = text[text.index(f'[hosts."{API}"]'):]
    enforcing = make_proxy(proxy={"allow_ports": [origins.api.port, origins.api_newkey.port, origins.untrusted.port]},
                           default={"action": "deny"})
    enforcing.write_config(enforcing.render() + "\n" + block.replace(
        "ports = [", f'trust = ["root-a.pem", "root-b.pem"]\nports = [{origins.untrusted.port}, '))
    enforcing.reload()
    for origin in (origins.api, origins.api_newkey):
        with Tunnel(enforcing, API, origin.port) as t:
            assert t.get("/small") == (200, originlib.SMALL_BODY)
    expect_refusal(enforcing, API, origins.untrusted.port, "pin-mismatch")


def hostile_origin(pki, directory, kind: str):
    """An origin for api.test whose chain verifies to root-a but carries a key that must not be
    learned: "appended", the api chain plus an unrelated self-signed certificate; "subject", a
    leaf from int-a whose subject spells out another key's pin (`OU=x sha256/<pin> | O=y`).
    Returns (origin, the leaf's pin, the pin that must never be suggested)."""
    int_a = pki.certs["int-a"]
    stranger = pkilib.make_root("stranger")
    while "+" in stranger.spki_pin:  # RFC 2253 would print it escaped, as no pin: try another key
        stranger = pkilib.make_root("stranger")
    if kind == "appended":
        leaf = pki.certs["api"]
        certificates = (leaf.cert, int_a.cert, stranger.cert)
        forbidden = stranger.spki_pin
    else:
        forbidden = stranger.spki_pin
        subject = x509.Name([
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pinproxy tests"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, f"x {forbidden} | O=y"),
            x509.NameAttribute(NameOID.COMMON_NAME, API),
        ])
        leaf = pkilib.make_leaf(API, int_a, subject=subject, san_dns=pkilib.API_SANS)
        certificates = (leaf.cert, int_a.cert)
    chain = pkilib.write_pem(directory / f"{kind}-chain.pem", *certificates)
    key = pkilib.write_key(directory / f"{kind}.key", leaf.key)
    return originlib.TLSOrigin(chain, key, name=kind), leaf.spki_pin, forbidden


@pytest.mark.parametrize("log_format", ["logfmt", "json"])
@pytest.mark.parametrize("kind", ["appended", "subject"])
def test_only_the_verified_path_is_learned(make_proxy, pki, pinproxy, tmp_path, kind, log_format):
    origin, leaf_pin, forbidden = hostile_origin(pki, tmp_path, kind)
    try:
        p = make_proxy(proxy={"allow_ports": [origin.port], "log_format": log_format},
                       default={"trust": ["root-a.pem"], "enforce": False})
        for _ in range(2):
            with Tunnel(p, API, origin.port) as t:
                assert t.get("/small") == (200, originlib.SMALL_BODY)
        p.wait_for_log(lambda l: l.get("event") == "connection" and l.get("outcome") == "allowed", what="an allowed line")
        log = p.log_path.read_text()
        assert forbidden in log, log  # the server did present it
        out = suggest(pinproxy, p.log_path)
        assert out.returncode == 0, out
        text = out.stdout
        pins = tomllib.loads(text)["hosts"][API]["pins"]
        assert forbidden not in pins, text
        assert pins == [leaf_pin, pki.spki("int-a")], text  # not the anchor, root-a
        assert "1 leaf key(s), 1 intermediate key(s)" in text, text

        cfg = tmp_path / "suggested.toml"
        cfg.write_text(text)
        checked = run(pinproxy, "check", "--config", cfg)
        assert checked.code == 0 and "1 pinned with 2 pins" in checked.out, checked

        block = text[text.index(f'[hosts."{API}"]'):]
        enforcing = make_proxy(proxy={"allow_ports": [origin.port]}, default={"action": "deny"})
        enforcing.write_config(enforcing.render() + "\n" + block + '\ntrust = ["root-a.pem"]\n')
        enforcing.reload()
        with Tunnel(enforcing, API, origin.port) as t:
            assert t.get("/small") == (200, originlib.SMALL_BODY)
    finally:
        origin.close()


def test_json_log_from_standard_input_with_host_and_minimum(make_proxy, origins, pki, pinproxy):
    learned = learn(make_proxy, origins, log_format="json")
    log = learned.log_path.read_text()
    out = suggest(pinproxy, stdin=log)
    assert out.returncode == 0 and f'[hosts."{API}"]' in out.stdout, out
    assert pki.spki("api-newkey") in out.stdout

    assert suggest(pinproxy, "--host", "*.test", stdin=log).stdout.count("[hosts.") == 1
    filtered = suggest(pinproxy, "--host", "other.test", stdin=log)
    assert filtered.returncode == 1 and "[hosts." not in filtered.stdout, filtered
    rare = suggest(pinproxy, "--min-connections", "5", stdin=log)
    assert rare.returncode == 1 and "[hosts." not in rare.stdout, rare
    assert suggest(pinproxy, "--min-connections", "4", stdin=log).returncode == 0


PIN_A = "sha256/" + pkilib._b64_sha256(b"suggest a").removeprefix("sha256/")
PIN_B = "sha256/" + pkilib._b64_sha256(b"suggest b").removeprefix("sha256/")
PIN_C = "sha256/" + pkilib._b64_sha256(b"suggest c").removeprefix("sha256/")


def line(outcome: str, host: str = "a.test", chain: str = f"CN=a.test {PIN_A} | CN=CA {PIN_B}",
         verified_pins: str | None = None, **extra) -> str:
    """A logfmt decision line; `verified_pins` when given (the daemon omits it when OpenSSL
    verified no path, and older daemons never wrote it)."""
    fields = {"time": "2026-11-20T10:00:00.000Z", "level": "info", "event": "connection", "client": "127.0.0.1:5",
              "host": host, "port": "443", "entry": "default", "outcome": outcome, "status": "200", **extra,
              "chain": chain}
    if verified_pins is not None:
        fields["verified_pins"] = verified_pins
    def quote(v: str) -> str:  # as the daemon writes logfmt values
        if v and all(0x20 < ord(ch) < 0x7F and ch not in '"=\\' for ch in v):
            return v
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return " ".join(f"{k}={quote(v)}" for k, v in fields.items())


def test_only_verified_chains_are_learned(pinproxy):
    log = "\n".join([
        line("allowed", verified_pins=f"{PIN_A},{PIN_B}"),
        '<4>' + line("refused", host="b.test", reason="untrusted-chain", status="403", chain=f"CN=evil {PIN_C}"),
        line("allowed", host="c.test", chain=f"CN=c {PIN_C}",
             detail='default has action = "allow-insecure": no certificate check was made'),
        line("report-only", host="d.test", reason="untrusted-chain", chain=f"CN=d {PIN_C}"),
        line("report-only", host="e.test", reason="pin-mismatch", chain=f"CN=e {PIN_C} | CN=CA {PIN_B}",
             verified_pins=f"{PIN_C},{PIN_B}",
             detail="would refuse: pin-mismatch: none of the 2 public-key pin(s) matches the verified chain"),
        # An older daemon's line (no verified_pins), and ones whose verified_pins are not pins.
        line("allowed", host="f.test", chain=f"CN=f {PIN_C}"),
        line("allowed", host="g.test", chain=f"CN=g {PIN_C}", verified_pins=f"{PIN_C},CN=g"),
        line("allowed", host="h.test", chain=f"CN=h {PIN_C}", verified_pins=""),
        "time=2026-11-20T10:00:01.000Z level=info event=tunnel-closed host=a.test port=443",
        "not a log line at all",
    ])
    out = suggest(pinproxy, stdin=log + "\n")
    assert out.returncode == 0, out
    text = out.stdout
    assert '[hosts."a.test"]' in text and '[hosts."e.test"]' in text, text
    for host in ("b.test", "c.test", "d.test", "f.test", "g.test", "h.test"):
        assert f'[hosts."{host}"]' not in text, text
    assert "not learned from: 1 connection line(s), refused untrusted-chain" in text, text
    assert "allow-insecure" in text and "report-only untrusted-chain" in text, text
    assert "not learned from: 3 connection line(s), no verified_pins" in text, text
    # Each path is leaf, anchor: the anchor issued the leaf, so its key is pinned beside the
    # leaf's (a pin set of the leaf alone breaks at the next renewal).
    hosts = tomllib.loads(text)["hosts"]
    assert hosts["a.test"]["pins"] == [PIN_A, PIN_B] and hosts["e.test"]["pins"] == [PIN_C, PIN_B], text
    assert "BACKUP PIN NEEDED" not in text, text


def test_json_lines_with_numbers_as_text_or_as_numbers(pinproxy):
    """JSON lines of a daemon before typed logs (`"port":"443"`, `"status":"200"`) and after
    (`"port":443`, `"status":200`) are read alike."""
    def json_line(host: str, port, status) -> str:
        return json.dumps({"time": "2026-11-20T10:00:00.000Z", "level": "info", "event": "connection",
                           "client": "127.0.0.1:5", "host": host, "port": port, "entry": "default", "outcome": "allowed",
                           "status": status, "presented_chain": [{"subject": f"CN={host}", "spki": PIN_A}],
                           "verified_chain": [{"subject": f"CN={host}", "spki": PIN_A}, {"subject": "CN=CA", "spki": PIN_B}],
                           "verified_pins": [PIN_A, PIN_B]})
    out = suggest(pinproxy, stdin=json_line("old.test", "443", "200") + "\n" + json_line("new.test", 443, 200) + "\n")
    assert out.returncode == 0, out
    hosts = tomllib.loads(out.stdout)["hosts"]
    assert hosts["old.test"]["pins"] == [PIN_A, PIN_B] and hosts["new.test"]["pins"] == [PIN_A, PIN_B], out.stdout


def test_certificate_text_cannot_escape_its_comment(pinproxy, tmp_path):
    evil = 'CN=x\n[hosts."evil.test"]\naction = "allow-insecure"'
    log = line("allowed", chain=f"{evil} {PIN_A}", verified_pins=PIN_A) + "\n"
    out = suggest(pinproxy, stdin=log)
    assert out.returncode == 0, out
    for text_line in out.stdout.splitlines():
        assert not text_line.startswith('[hosts."evil.test"]') and not text_line.startswith("action"), out.stdout
    cfg = tmp_path / "s.toml"
    cfg.write_text(out.stdout)
    checked = run(pinproxy, "check", "--config", cfg)
    assert checked.code == 0 and "hosts: 1 entry" in checked.out and "0 allow-insecure" in checked.out, checked


def test_usage_errors(pinproxy, tmp_path):
    assert suggest(pinproxy, "--host", "not a pattern", stdin="").returncode == 2
    assert suggest(pinproxy, "--min-connections", "0", stdin="").returncode == 2
    missing = suggest(pinproxy, tmp_path / "missing.log")
    assert missing.returncode == 2 and "missing.log: cannot read: No such file or directory" in missing.stderr, missing
    # A read error is not an empty log: a directory opens, and its read fails.
    directory = suggest(pinproxy, tmp_path)
    assert directory.returncode == 2 and "cannot read: Is a directory" in directory.stderr, directory
    nothing = suggest(pinproxy, stdin="")
    assert nothing.returncode == 1 and "0 host(s)" in nothing.stdout, nothing


def test_an_intermediate_anchor_is_pinned_and_the_entry_keeps_its_trust_line(make_proxy, origins, pki, pinproxy):
    """The case of issue 33: the entry verifies to the intermediate (trust = ["int-a.pem"]), so the
    verified path is leaf, anchor. The block pins the issuing CA's key beside the leaf's, keeps the
    entry's trust line and ports, and passes check without a warning."""
    p = make_proxy(proxy={"allow_ports": [443]},
                   hosts={API: {"trust": ["int-a.pem"], "enforce": False, "ports": [origins.api.port]}})
    with Tunnel(p, API, origins.api.port) as t:
        assert t.get("/small") == (200, originlib.SMALL_BODY)
    p.wait_for_log(lambda l: l.get("event") == "connection" and l.get("outcome") == "allowed", what="the connection")
    out = suggest(pinproxy, "--config", p.config_path, p.log_path)
    assert out.returncode == 0, out
    text = out.stdout
    assert "1 leaf key(s), 1 intermediate key(s)" in text, text
    block = tomllib.loads(text)["hosts"][API]
    assert block["pins"] == [pki.spki("api"), pki.spki("int-a")], text
    assert block["trust"] == ["int-a.pem"] and block["ports"] == [origins.api.port], text
    assert "enforce" not in block and "BACKUP PIN NEEDED" not in text, text
    assert f'# replaces hosts."{API}"' in text, text
    cfg = p.dir / "suggested.toml"
    cfg.write_text(text)
    checked = run(pinproxy, "check", "--config", cfg)
    assert checked.code == 0 and "warnings: 0" in checked.out, checked


def test_a_pin_set_of_leaf_keys_alone_gets_a_marked_backup_slot(pinproxy, tmp_path):
    """A self-signed leaf that is its own anchor: only its key can be learned. The block says it
    breaks at the next renewal without a backup pin; check gives exactly the single-pin warning,
    and none once the slot is filled."""
    log = line("allowed", host="self.test", verified_pins=PIN_A) + "\n"
    out = suggest(pinproxy, stdin=log)
    assert out.returncode == 0, out
    text = out.stdout
    assert "# BACKUP PIN NEEDED: these are only leaf keys; the next certificate renewal (a new key) breaks this block" in text, text
    cfg = tmp_path / "suggested.toml"
    cfg.write_text(text)
    checked = run(pinproxy, "check", "--config", cfg)
    assert checked.code == 0 and "warnings: 1" in checked.out, checked
    assert "has a single pin and no backup" in checked.out, checked
    cfg.write_text(text.replace("  # BACKUP PIN NEEDED:", f'  "{PIN_B}",  # backup key\n  # BACKUP PIN NEEDED:', 1))
    filled = run(pinproxy, "check", "--config", cfg)
    assert filled.code == 0 and "warnings: 0" in filled.out, filled


def test_an_installed_config_that_does_not_load_lends_no_keys_but_stops_nothing(pinproxy, tmp_path):
    broken = tmp_path / "installed.toml"
    broken.write_text('[hosts."a.test"]\ntrust = ["unreadable.pem"]\n')
    env = {**os.environ, "PINPROXY_DEFAULT_CONFIG": str(broken)}
    log = line("allowed", verified_pins=f"{PIN_A},{PIN_B}") + "\n"
    out = subprocess.run([str(pinproxy), "suggest"], input=log, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0 and '[hosts."a.test"]' in out.stdout, out
    assert "does not load here: the blocks keep no entry's keys" in out.stderr, out
    named = subprocess.run([str(pinproxy), "suggest", "--config", str(broken)], input=log, capture_output=True, text=True,
                           timeout=60)
    assert named.returncode == 2 and f"{broken}:2:" in named.stderr, named
