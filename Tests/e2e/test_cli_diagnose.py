"""`pinproxy diagnose HOST[:PORT]`: one screen about a live server.

Loopback origins that accept only TLS 1.2, only TLS 1.3, also TLS 1.0, send an incomplete chain,
and staple OCSP (openssl s_server -status_file). Each shows what a user needs: which versions
are accepted (old ones flagged), the cipher and forward secrecy, ALPN, the chain as sent, and
with --config the entry's checks and the daemon's verdict, plus a block to paste. Exit 0 when
the policy would allow, 1 otherwise, 2 on usage errors.
"""

from __future__ import annotations

import datetime as dt
import http.server
import os
import re
import shutil
import subprocess
import threading

import pytest

import origin as originlib
import pki as pkilib
from conftest import PIN_X, PIN_Y
from proxy_harness import API, Tunnel, expect_refusal, free_port, make_proxy, poll, port_accepts  # noqa: F401 (fixture)


def diagnose(pinproxy, *args, env=None):
    return subprocess.run([str(pinproxy), "diagnose", *map(str, args)], capture_output=True, text=True, timeout=120,
                          env=env)


def config(ws_dir, pki, *, port: int, resolve: bool = True, **entry) -> str:
    keys = {"trust": f'["{pki.path("root-a.pem")}"]', **entry}
    body = "".join(f"{k} = {v}\n" for k, v in keys.items())
    text = (f'[resolve]\n"{API}" = "127.0.0.1"\n\n' if resolve else "") + f'[hosts."{API}"]\nports = [{port}]\n' + body
    path = ws_dir / "diagnose.toml"
    path.write_text(text)
    return str(path)


@pytest.fixture
def tls12(pki):
    o = originlib.TLSOrigin(pki.path("api-chain.pem"), pki.path("api.key"), name="d-tls12", max_tls="1.2")
    yield o
    o.close()


@pytest.fixture
def tls13(pki):
    o = originlib.TLSOrigin(pki.path("api-chain.pem"), pki.path("api.key"), name="d-tls13", min_tls="1.3")
    yield o
    o.close()


def test_tls12_only_server_with_a_pinned_entry(pinproxy, pki, tls12, tmp_path):
    cfg = config(tmp_path, pki, port=tls12.port, pin='"public-key"', pins=f'["{pki.spki("int-a")}"]')
    r = diagnose(pinproxy, f"{API}:{tls12.port}", "--config", cfg)
    assert r.returncode == 0, r
    out = r.stdout
    assert f"connecting to 127.0.0.1:{tls12.port}, SNI {API}" in out  # [resolve] honoured
    assert re.search(r"TLS 1\.3\s+refused", out), out
    assert re.search(r"TLS 1\.2\s+accepted\s+ECDHE-\S+\s+forward secrecy", out), out
    assert re.search(r"TLS 1\.1\s+refused", out) and re.search(r"TLS 1\.0\s+refused", out), out
    assert "chain as sent: 2 certificate(s)" in out and "key: EC P-256" in out, out
    assert "leaf first, each certificate issued by the next" in out and "root included: no" in out, out
    assert "complete: yes (ends at CN=pinproxy test root A" in out, out
    assert "ALPN: h2 not accepted, http/1.1 not accepted (the server selects no protocol)" in out, out
    assert pki.spki("api") in out and pki.cert("api") in out, out
    assert f'policy: entry hosts."{API}"' in out, out
    for check in ("trust", "host name", "pins", "min_tls"):
        assert re.search(rf"^  {check}\s+pass", out, re.M), (check, out)
    assert f"{pki.spki('int-a')} matched [1]" in out, out
    assert "OCSP staple: not sent" in out and "verdict: allow" in out, out
    assert f'[hosts."{API}"]' in out and f"ports = [{tls12.port}]" in out, out


def test_tls13_only_server_through_connect_to_with_a_wrong_pin(pinproxy, pki, tls13, tmp_path):
    cfg = config(tmp_path, pki, port=tls13.port, resolve=False, pin='"public-key"', pins=f'["{pki.spki("root-b")}"]')
    r = diagnose(pinproxy, f"{API}:{tls13.port}", "--config", cfg, "--connect-to", "127.0.0.1")
    assert r.returncode == 1, r
    out = r.stdout
    assert re.search(r"TLS 1\.3\s+accepted\s+TLS_\S+\s+forward secrecy", out), out
    assert re.search(r"TLS 1\.2\s+refused", out), out
    assert re.search(r"^  pins\s+FAIL\s+pin-mismatch", out, re.M), out
    assert "verdict: refuse: pin-mismatch" in out, out


def test_deprecated_versions_are_flagged(pinproxy, pki, tmp_path):
    o = originlib.TLSOrigin(pki.path("api-chain.pem"), pki.path("api.key"), name="d-tls10", min_tls="1.0")
    try:
        r = diagnose(pinproxy, f"{API}:{o.port}", "--connect-to", f"127.0.0.1:{o.port}",
                     env={**os.environ, "SSL_CERT_FILE": str(pki.path("root-a.pem"))})
    finally:
        o.close()
    assert r.returncode == 0, r
    assert re.search(r"TLS 1\.0\s+accepted.*deprecated", r.stdout), r.stdout
    assert "policy: the built-in default's [default]" in r.stdout and "verdict: allow" in r.stdout, r.stdout


def test_incomplete_chain_is_refused_and_shown(pinproxy, pki, tmp_path):
    o = originlib.TLSOrigin(pki.path("api.pem"), pki.path("api.key"), name="d-leafonly")
    try:
        r = diagnose(pinproxy, f"{API}:{o.port}", "--config", config(tmp_path, pki, port=o.port))
    finally:
        o.close()
    assert r.returncode == 1, r
    assert "chain as sent: 1 certificate(s)" in r.stdout, r.stdout
    assert "complete: no, or not to an anchor of this policy: CN=pinproxy test intermediate A" in r.stdout, r.stdout
    assert re.search(r"^  trust\s+FAIL\s+untrusted-chain", r.stdout, re.M), r.stdout
    assert "verdict: refuse: untrusted-chain" in r.stdout


def test_without_config_the_system_store_decides(pinproxy, pki, tls12):
    r = diagnose(pinproxy, f"{API}:{tls12.port}", "--connect-to", "127.0.0.1")
    assert r.returncode == 1 and "verdict: refuse: untrusted-chain" in r.stdout, r
    trusted = diagnose(pinproxy, f"{API}:{tls12.port}", "--connect-to", "127.0.0.1",
                       env={**os.environ, "SSL_CERT_FILE": str(pki.path("root-a.pem"))})
    assert trusted.returncode == 0 and "verdict: allow" in trusted.stdout, trusted


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command for a stapling server")
def test_ocsp_staple_is_reported_and_checked(pinproxy, pki, tmp_path):
    now = dt.datetime.now(dt.timezone.utc)
    staple = tmp_path / "staple.der"
    staple.write_bytes(pkilib.to_der(pkilib.make_ocsp(pki.issued("api"), pki.issued("int-a"), "good",
                                                      now - dt.timedelta(days=1), now + dt.timedelta(days=6))))
    port = free_port()
    server = subprocess.Popen(
        ["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-cert", str(pki.path("api.pem")),
         "-key", str(pki.path("api.key")), "-cert_chain", str(pki.path("int-a.pem")), "-status_file", str(staple),
         "-www", "-quiet"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        poll(lambda: port_accepts(port), what="openssl s_server")
        cfg = config(tmp_path, pki, port=port, revocation='"ocsp-staple"')
        r = diagnose(pinproxy, f"{API}:{port}", "--config", cfg)
    finally:
        server.kill()
        server.wait()
    assert r.returncode == 0, r
    assert re.search(r"OCSP staple: sent \(\d+ bytes\)", r.stdout), r.stdout
    assert re.search(r"^  revocation\s+pass", r.stdout, re.M), r.stdout


def test_usage_errors(pinproxy, tmp_path):
    assert diagnose(pinproxy).returncode == 2
    assert diagnose(pinproxy, "not a host!").returncode == 2
    assert diagnose(pinproxy, "api.test:0").returncode == 2
    bad = tmp_path / "bad.toml"
    bad.write_text("[hosts.\"api.test\"]\nnonsense = 1\n")
    r = diagnose(pinproxy, "api.test", "--config", bad)
    assert r.returncode == 2 and f"{bad}:2:" in r.stderr, r


def test_the_suggested_block_passes_check_and_the_daemon_allows_the_server(pinproxy, pki, make_proxy):
    """The entry pins keys the server no longer has (pin-mismatch), verifies to a listed anchor and
    allows two ports: the block diagnose prints keeps the anchor and both ports, and pasted in the
    entry's place it passes check and the daemon allows the server."""
    o = originlib.TLSOrigin(pki.path("api-chain.pem"), pki.path("api.key"), name="d-paste")
    try:
        entry = {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X, PIN_Y], "ports": [o.port, 9443]}
        p = make_proxy(start=False, proxy={"allow_ports": [443]}, hosts={API: entry})
        r = diagnose(pinproxy, f"{API}:{o.port}", "--config", p.config_path)
        assert r.returncode == 1 and "verdict: refuse: pin-mismatch" in r.stdout, r
        block = r.stdout[r.stdout.index(f'[hosts."{API}"]'):]
        assert 'trust = ["root-a.pem"]' in block, block
        assert f"ports = [{min(o.port, 9443)}, {max(o.port, 9443)}]" in block, block
        header = re.search(rf'^\[hosts\."{re.escape(API)}"\]\n(?:[^\[\n].*\n|\n)*', p.config_text, re.M)
        assert header, p.config_text
        p.write_config(p.config_text[:header.start()] + block + "\n" + p.config_text[header.end():])
        check = subprocess.run([str(pinproxy), "check", "--config", str(p.config_path)], capture_output=True, text=True,
                               timeout=60)
        assert check.returncode == 0, (check, p.config_text)
        p.start()
        t = Tunnel(p, API, o.port)
        try:
            status, _ = t.get("/small")
        finally:
            t.close()
        assert status == 200, p.describe()
    finally:
        o.close()


def test_a_block_for_a_chain_the_entry_cannot_verify_names_the_anchor_it_needs(pinproxy, pki, tmp_path):
    """The entry verifies to root B; the server's chain goes to root A: the block's trust names
    the top certificate the server sent instead of keeping an anchor that cannot verify it."""
    o = originlib.TLSOrigin(pki.path("api-fullchain.pem"), pki.path("api.key"), name="d-anchor")
    try:
        r = diagnose(pinproxy, f"{API}:{o.port}", "--config",
                     config(tmp_path, pki, port=o.port, trust=f'["{pki.path("root-b.pem")}"]'))
    finally:
        o.close()
    assert r.returncode == 1 and "verdict: refuse: untrusted-chain" in r.stdout, r
    block = r.stdout[r.stdout.index(f'[hosts."{API}"]'):]
    assert "# anchor: the root the server presented: CN=pinproxy test root A" in block, block
    assert 'trust = ["api.test-anchor.pem"]' in block and "root-b.pem" not in block, block


def test_a_missing_intermediate_gets_the_anchor_the_config_already_has(pinproxy, pki, make_proxy):
    """The case of issue 33: the server sends its leaf alone; the config lists its issuer (the
    intermediate) as the anchor of three other entries. The block proposes that anchor file as the
    config writes it, never the leaf, pins the issuer's key beside the leaf's, passes check without
    a warning, and the daemon allows the server with it."""
    o = originlib.TLSOrigin(pki.path("api.pem"), pki.path("api.key"), name="d-noint")
    try:
        others = {name: {"trust": ["int-a.pem"]} for name in ("one.test", "two.test", "three.test")}
        p = make_proxy(start=False, proxy={"allow_ports": [443]},
                       hosts={**others, API: {"trust": ["root-a.pem"], "ports": [o.port]}})
        r = diagnose(pinproxy, f"{API}:{o.port}", "--config", p.config_path)
        assert r.returncode == 1 and "verdict: refuse: untrusted-chain" in r.stdout, r
        assert "was not sent" in r.stdout, r.stdout
        block = r.stdout[r.stdout.index(f'[hosts."{API}"]'):]
        assert "the leaf itself" not in block and "anchor.pem" not in block, block
        assert 'trust = ["int-a.pem"]' in block, block
        assert "already lists" in block and "CN=pinproxy test intermediate A" in block, block
        assert pki.spki("api") in block and pki.spki("int-a") in block and "BACKUP PIN NEEDED" not in block, block
        header = re.search(rf'^\[hosts\."{re.escape(API)}"\]\n(?:[^\[\n].*\n|\n)*', p.config_text, re.M)
        p.write_config(p.config_text[:header.start()] + block + "\n" + p.config_text[header.end():])
        check = subprocess.run([str(pinproxy), "check", "--config", str(p.config_path)], capture_output=True, text=True,
                               timeout=60)
        assert check.returncode == 0 and "warnings: 0" in check.stdout, (check, p.config_text)
        p.start()
        with Tunnel(p, API, o.port) as t:
            assert t.get("/small")[0] == 200, p.describe()
    finally:
        o.close()


def test_a_leaf_sent_alone_is_never_proposed_as_its_own_anchor(pinproxy, pki, tmp_path):
    """Neither the config nor the system store has the issuer of a leaf sent alone: no anchor is
    proposed (the leaf is not self-signed), the entry keeps its trust line, and the pin set of the
    leaf alone carries the marked backup slot."""
    o = originlib.TLSOrigin(pki.path("api.pem"), pki.path("api.key"), name="d-leafalone")
    try:
        r = diagnose(pinproxy, f"{API}:{o.port}", "--config", config(tmp_path, pki, port=o.port))
    finally:
        o.close()
    assert r.returncode == 1, r
    block = r.stdout[r.stdout.index(f'[hosts."{API}"]'):]
    assert "the leaf itself" not in block and "anchor.pem" not in block, block
    assert "no anchor proposed: the server sent its leaf alone, and a leaf that is not self-signed is no anchor" in block, block
    assert f'trust = ["{pki.path("root-a.pem")}"]' in block, block
    assert "BACKUP PIN NEEDED" in block, block


def test_a_self_signed_leaf_may_be_its_own_anchor(pinproxy, pki, tmp_path):
    o = originlib.TLSOrigin(pki.path("self.pem"), pki.path("self.key"), name="d-self")
    try:
        r = diagnose(pinproxy, f"self.test:{o.port}", "--connect-to", "127.0.0.1")
    finally:
        o.close()
    block = r.stdout[r.stdout.index('[hosts."self.test"]'):]
    assert "# anchor: the leaf itself (self-signed" in block and 'trust = ["self.test-anchor.pem"]' in block, block
    assert "BACKUP PIN NEEDED" in block, block


class IssuerServer:
    """A plain-HTTP origin on loopback serving BODY at /issuer.der, the URL a leaf's AIA names;
    it records every path asked for."""

    def __init__(self, body: bytes):
        requests: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                requests.append(self.path)
                found = self.path == "/issuer.der"
                self.send_response(200 if found else 404)
                self.send_header("Content-Type", "application/pkix-cert")
                self.send_header("Content-Length", str(len(body) if found else 0))
                self.end_headers()
                if found:
                    self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.requests = requests
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/issuer.der"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def leaf_naming(pki, tmp_path, url: str) -> tuple[pkilib.Issued, str, str]:
    """A leaf for api.test issued by intermediate A whose AIA caIssuers names URL (loopback):
    it, its key file, and a chain file of the leaf and intermediate A."""
    leaf = pkilib.make_leaf(API, pki.issued("int-a"), san_dns=pkilib.API_SANS, ca_issuers=[url])
    leaf.write(tmp_path, "aia", pki.issued("int-a"))
    return leaf, str(tmp_path / "aia.key"), str(tmp_path / "aia-chain.pem")


def test_a_missing_intermediate_fetched_from_the_aia_url_reaches_the_config_anchor(pinproxy, pki, make_proxy, tmp_path):
    """The server sends its leaf alone; the leaf's AIA URL (loopback) serves intermediate A; the
    config lists root A. diagnose fetches the issuer, finds the path to root A, and, since the
    daemon verifies only the chain a server sends, proposes nothing to paste yet: the block that
    allows the server once it sends its intermediate is commented out, trusts root A (never the
    fetched certificate), and pins the leaf and the fetched key, marked. Uncommented and pasted, it
    passes check; the daemon refuses the leaf alone (as diagnose said) and allows leaf + intermediate."""
    issuer = IssuerServer(pki.issued("int-a").der)
    leaf, key, chain = leaf_naming(pki, tmp_path, issuer.url)
    alone = originlib.TLSOrigin(tmp_path / "aia.pem", key, name="d-aia")
    port = alone.port
    try:
        p = make_proxy(start=False, proxy={"allow_ports": [443]}, hosts={API: {"trust": ["root-a.pem"], "ports": [port]}})
        r = diagnose(pinproxy, f"{API}:{port}", "--config", p.config_path)
        assert r.returncode == 1 and "verdict: refuse: untrusted-chain" in r.stdout, r
        assert issuer.requests == ["/issuer.der"], issuer.requests
        assert (f"the leaf's AIA URL {issuer.url} served CN=pinproxy test intermediate A,O=pinproxy tests "
                f"(issued the leaf; public-key: {pki.spki('int-a')})") in r.stdout, r.stdout
        tail = r.stdout[r.stdout.index("verdict: "):]
        assert not re.search(r"^\[hosts\.", tail, re.M), tail  # nothing to paste as it is
        assert "no block to paste yet" in tail and "until it sends that intermediate after its leaf" in tail, tail
        commented = tail[tail.index(f'# [hosts."{API}"]'):].rstrip("\n").split("\n")
        assert all(line.startswith("# ") for line in commented), commented
        block = "\n".join(line[2:] for line in commented)
        assert 'trust = ["root-a.pem"]' in block and "int-a" not in block and "anchor.pem" not in block, block
        assert "with the issuer fetched from the leaf's AIA URL, the leaf verifies to an anchor" in block, block
        assert f'"{leaf.spki_pin}",  # leaf:' in block, block
        assert re.search(rf'"{re.escape(pki.spki("int-a"))}",  # intermediate: .*; fetched from the AIA URL '
                         rf'{re.escape(issuer.url)}, unverified until the path to the anchor verifies$', block, re.M), block
        assert "BACKUP PIN NEEDED" not in block, block
        header = re.search(rf'^\[hosts\."{re.escape(API)}"\]\n(?:[^\[\n].*\n|\n)*', p.config_text, re.M)
        p.write_config(p.config_text[:header.start()] + block + "\n" + p.config_text[header.end():])
        check = subprocess.run([str(pinproxy), "check", "--config", str(p.config_path)], capture_output=True, text=True,
                               timeout=60)
        assert check.returncode == 0 and "warnings: 0" in check.stdout, (check, p.config_text)
        p.start()
        expect_refusal(p, API, port, "untrusted-chain")
        alone.close()
        alone = originlib.TLSOrigin(chain, key, name="d-aia-fixed", port=port)
        with Tunnel(p, API, port) as t:
            assert t.get("/small")[0] == 200, p.describe()
    finally:
        alone.close()
        issuer.close()


def test_an_aia_issuer_that_reaches_no_known_anchor_is_proposed_as_nothing(pinproxy, pki, tmp_path):
    """The leaf's AIA URL serves a certificate that leads to no anchor the config or the system store
    has (intermediate B): diagnose says so, proposes no anchor and pins nothing of what it fetched."""
    issuer = IssuerServer(pkilib.to_pem(pki.issued("int-b").cert))
    leaf, key, _ = leaf_naming(pki, tmp_path, issuer.url)
    o = originlib.TLSOrigin(tmp_path / "aia.pem", key, name="d-aia-none")
    try:
        r = diagnose(pinproxy, f"{API}:{o.port}", "--config", config(tmp_path, pki, port=o.port))
    finally:
        o.close()
        issuer.close()
    assert r.returncode == 1, r
    assert issuer.requests == ["/issuer.der"], issuer.requests
    assert "served CN=pinproxy test intermediate B,O=pinproxy tests (did NOT issue the leaf" in r.stdout, r.stdout
    block = r.stdout[r.stdout.index(f'[hosts."{API}"]'):]
    assert f"the issuer fetched from the leaf's AIA URL ({issuer.url}) completes no path to an anchor" in block, block
    assert pki.spki("int-b") not in block and "anchor.pem" not in block, block
    assert f'trust = ["{pki.path("root-a.pem")}"]' in block, block


def test_a_leaf_without_an_aia_url_fetches_nothing(pinproxy, pki, tmp_path):
    o = originlib.TLSOrigin(pki.path("api.pem"), pki.path("api.key"), name="d-noaia")
    try:
        r = diagnose(pinproxy, f"{API}:{o.port}", "--config", config(tmp_path, pki, port=o.port))
    finally:
        o.close()
    assert "  the leaf names no URL for its issuer (AIA caIssuers)" in r.stdout, r.stdout


@pytest.mark.parametrize("case", ["oversized", "https"])
def test_an_aia_url_is_fetched_only_over_plain_http_and_within_64_kib(pinproxy, pki, tmp_path, case):
    """An answer over 64 KiB is not read as an issuer; an https:// URL is not fetched at all."""
    issuer = IssuerServer(pki.issued("int-a").der + b"\0" * (64 * 1024))
    url = issuer.url if case == "oversized" else issuer.url.replace("http://", "https://")
    _, key, _ = leaf_naming(pki, tmp_path, url)
    o = originlib.TLSOrigin(tmp_path / "aia.pem", key, name=f"d-aia-{case}")
    try:
        r = diagnose(pinproxy, f"{API}:{o.port}", "--config", config(tmp_path, pki, port=o.port))
    finally:
        o.close()
        issuer.close()
    assert r.returncode == 1, r
    why = "the answer is over 64 KiB" if case == "oversized" else "only a plain http:// URL is fetched"
    assert f"the leaf's AIA URL {url}: no issuer fetched ({why})" in r.stdout, r.stdout
    assert issuer.requests == (["/issuer.der"] if case == "oversized" else []), issuer.requests
    block = r.stdout[r.stdout.index(f'[hosts."{API}"]'):]
    assert pki.spki("int-a") not in block and f'trust = ["{pki.path("root-a.pem")}"]' in block, block


def test_an_aia_issuer_may_lead_to_the_system_store(pinproxy, pki, tmp_path):
    """Without a config, the built-in [default] trusts the system store (here SSL_CERT_FILE = root A):
    the fetched issuer completes the path to it, and the commented block says so, with no trust line."""
    issuer = IssuerServer(pki.issued("int-a").der)
    leaf, key, _ = leaf_naming(pki, tmp_path, issuer.url)
    o = originlib.TLSOrigin(tmp_path / "aia.pem", key, name="d-aia-system")
    try:
        r = diagnose(pinproxy, f"{API}:{o.port}", "--connect-to", "127.0.0.1",
                     env={**os.environ, "SSL_CERT_FILE": str(pki.path("root-a.pem"))})
    finally:
        o.close()
        issuer.close()
    assert r.returncode == 1 and "verdict: refuse: untrusted-chain" in r.stdout, r
    tail = r.stdout[r.stdout.index("verdict: "):]
    assert "no block to paste yet" in tail and not re.search(r"^\[hosts\.", tail, re.M), tail
    assert ("# # with the issuer fetched from the leaf's AIA URL, the leaf verifies to the system trust store: "
            "CN=pinproxy test root A") in tail, tail
    assert "# trust = " not in tail and leaf.spki_pin in tail and pki.spki("int-a") in tail, tail
