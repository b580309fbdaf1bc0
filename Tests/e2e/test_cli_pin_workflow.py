"""Pins without openssl: `pinproxy pin` on key files, `pinproxy keygen`, and
`pinproxy pin --connect HOST` with `--config` ([resolve]), `--connect-to` and the `trust`
line a private CA needs (the printed block then passes `check` and `evaluate` allows)."""

from __future__ import annotations

import os
import stat
import subprocess

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from conftest import AT, PIN_RE, TIMEOUT, pkilib
from test_cli_pin import paste_block, pins_in

import re


def public_key_of(ws, stem):
    return pkilib.load_certs(ws.path(f"{stem}.pem"))[0].public_key()


# ---------------------------------------------------------------- key files


def test_pin_private_key_prints_its_public_key_pin_only(ws, pki):
    for stem in ("api", "api-rsa"):
        res = ws.pin(ws.path(f"{stem}.key"))
        assert res.code == 0, res
        spkis, certs = pins_in(res.out)
        assert spkis == [pki.spki(stem)] and certs == [], res
        assert "private key" in res.out, res
        assert "BEGIN" not in res.out + res.err, res  # the key itself is never printed


def test_pin_public_key_pem_and_der(ws, pki):
    key = public_key_of(ws, "api")
    pem = ws.write("api.pub", key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    der = ws.write("api.pub.der", key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo))
    res = ws.pin(pem, der, ws.path("api.pem"))
    assert res.code == 0, res
    assert pins_in(res.out)[0] == [pki.spki("api")] * 3, res
    assert "public key (EC P-256)" in res.out, res


def test_pin_der_private_key(ws, pki):
    key = serialization.load_pem_private_key(ws.path("api.key").read_bytes(), None)
    der = ws.write("api.key.der", key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))
    res = ws.pin(der)
    assert res.code == 0, res
    assert pins_in(res.out)[0] == [pki.spki("api")], res


def test_pin_encrypted_private_key_is_a_clear_error(ws):
    key = serialization.load_pem_private_key(ws.path("api.key").read_bytes(), None)
    p = ws.write("enc.key", key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.BestAvailableEncryption(b"secret")))
    res = ws.pin(p)  # stdin is /dev/null: a passphrase prompt would hang or fail differently
    assert res.code == 1, res
    assert "encrypted private key" in res.err and str(p) in res.err, res


# ---------------------------------------------------------------- keygen


def test_keygen_writes_a_0600_p256_key_and_prints_its_pin(ws):
    path = ws.path("backup.key")
    res = ws.run("keygen", path)
    assert res.code == 0, res
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    key = serialization.load_pem_private_key(path.read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1"
    want = pkilib._b64_sha256(key.public_key().public_bytes(serialization.Encoding.DER,
                                                            serialization.PublicFormat.SubjectPublicKeyInfo))
    assert pins_in(res.out)[0] == [want], res
    assert "PRIVATE KEY" not in res.out, res
    # pin on the key file gives the same pin.
    assert pins_in(ws.pin(path).out)[0] == [want]


def test_keygen_never_replaces_a_file(ws):
    path = ws.write("existing.key", "keep me\n")
    res = ws.run("keygen", path)
    assert res.code == 1, res
    assert path.read_text() == "keep me\n"
    assert "exists" in res.err, res


def test_keygen_ignores_a_permissive_umask(ws, pinproxy):
    path = ws.path("umask.key")
    p = subprocess.run(["sh", "-c", 'umask 000; exec "$0" keygen "$1"', str(pinproxy), str(path)],
                       capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


# ---------------------------------------------------------------- --connect with [resolve], --connect-to, trust


def test_connect_uses_config_resolve_and_sends_sni(ws, pki, tls_server):
    srv = tls_server("api-chain.pem", "api.key")
    cfg = ws.config('[resolve]\n"api.test" = "127.0.0.1"\n')
    res = ws.pin("--connect", f"api.test:{srv.port}", "--config", cfg)
    assert res.code == 0, res
    assert srv.sni == ["api.test"], srv.sni
    assert pki.spki("api") in paste_block(res.out, "api.test")["pins"], res


def test_connect_to_dials_the_address_with_host_as_sni(ws, pki, tls_server):
    srv = tls_server("api-chain.pem", "api.key")
    res = ws.pin("--connect", "api.test", "--connect-to", f"127.0.0.1:{srv.port}")
    assert res.code == 0, res
    assert srv.sni == ["api.test"], srv.sni
    block = paste_block(res.out, "api.test")
    assert pki.spki("api") in block["pins"], res
    assert "ports" not in block, res  # the CONNECT port is HOST's (443), not the dialled one


def test_connect_without_resolve_entry_or_address_fails_cleanly(ws):
    cfg = ws.config('[resolve]\n"other.test" = "127.0.0.1"\n')
    res = ws.pin("--connect", "nx.pinproxy-e2e.invalid:1", "--config", cfg, "--timeout", "2")
    assert res.code == 1, res
    assert "nx.pinproxy-e2e.invalid" in res.err, res


def test_private_ca_block_has_trust_and_is_accepted(ws, pki, tls_server):
    srv = tls_server("api-chain.pem", "api.key")  # api + int-a; root-a is in no system store
    anchor = ws.path("api.test-anchor.pem")
    res = ws.pin("--connect", f"api.test:{srv.port}", "--connect-to", f"127.0.0.1:{srv.port}",
                 "--save-anchor", anchor)
    assert res.code == 0, res
    block = paste_block(res.out, "api.test")
    assert block["trust"] == [str(anchor)], res
    assert pkilib.load_certs(anchor)[0].subject.rfc4514_string().endswith(pkilib.INT_A_CN) or \
        pkilib.INT_A_CN in pkilib.load_certs(anchor)[0].subject.rfc4514_string(), anchor.read_text()
    # The printed block, as is, makes a config that check accepts and under which the chain is allowed.
    text = res.out[res.out.index('[hosts."api.test"]'):]
    cfg = ws.write("pinproxy.toml", f"[proxy]\nallow_ports = [{srv.port}]\n\n" + text)
    check = ws.check(cfg)
    assert check.code == 0, check
    ev = ws.evaluate(cfg, "api.test", "api-chain.pem", port=srv.port)
    assert ev.first == "allow", ev
    # The same block without the trust line refuses untrusted-chain: the line is what makes it work.
    cfg2 = ws.write("notrust.toml", "\n".join(l for l in cfg.read_text().splitlines() if not l.startswith("trust")))
    assert ws.evaluate(cfg2, "api.test", "api-chain.pem", port=srv.port).first == "refuse: untrusted-chain"


def test_trust_line_without_save_anchor_says_how(ws, tls_server):
    srv = tls_server("api-chain.pem", "api.key")
    res = ws.pin("--connect", f"127.0.0.1:{srv.port}")
    assert res.code == 0, res
    assert re.search(r'^trust = \["127.0.0.1-anchor.pem"\]$|^trust = \["server-anchor.pem"\]$', res.out, re.M), res
    assert "--save-anchor" in res.out, res


def test_no_trust_line_when_the_system_store_verifies(ws, pinproxy, tls_server):
    srv = tls_server("api-chain.pem", "api.key")
    env = dict(os.environ, SSL_CERT_FILE=str(ws.path("root-a.pem")))
    p = subprocess.run([str(pinproxy), "pin", "--connect", "api.test", "--connect-to", f"127.0.0.1:{srv.port}"],
                       capture_output=True, text=True, timeout=TIMEOUT, env=env, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p
    assert "trust =" not in p.stdout, p.stdout
    assert re.search(PIN_RE, p.stdout)


def test_save_anchor_path_resolves_as_printed_from_the_config(ws, pki, tls_server):
    """The case of issue 33: `pin --connect … --config etc/pinproxy.toml --save-anchor
    etc/lab-anchor.pem` run from the directory above etc/. The trust line names the file relative
    to the config's directory (lab-anchor.pem, not etc/lab-anchor.pem), so pasted into that config
    it resolves to the saved file; without --config the path printed is absolute."""
    srv = tls_server("api-chain.pem", "api.key")
    site = ws.dir / "site"
    (site / "etc").mkdir(parents=True)
    cfg = site / "etc/pinproxy.toml"
    cfg.write_text(f'[resolve]\n"api.test" = "127.0.0.1"\n\n[proxy]\nallow_ports = [{srv.port}]\n\n')
    res = ws.run("pin", "--connect", f"api.test:{srv.port}", "--config", "etc/pinproxy.toml",
                 "--save-anchor", "etc/lab-anchor.pem", cwd=site)
    assert res.code == 0, res
    assert (site / "etc/lab-anchor.pem").is_file()
    assert paste_block(res.out, "api.test")["trust"] == ["lab-anchor.pem"], res
    cfg.write_text(cfg.read_text() + res.out[res.out.index('[hosts."api.test"]'):])
    check = ws.run("check", "--config", "etc/pinproxy.toml", cwd=site)
    assert check.code == 0 and "lab-anchor.pem" not in check.err, check

    # Without --config: absolute, whatever the working directory.
    res = ws.run("pin", "--connect", "api.test", "--connect-to", f"127.0.0.1:{srv.port}",
                 "--save-anchor", "etc/other-anchor.pem", cwd=site)
    assert res.code == 0, res
    assert paste_block(res.out, "api.test")["trust"] == [str(site / "etc/other-anchor.pem")], res
