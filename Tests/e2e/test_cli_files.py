"""The files pinproxy reads: certificates, bundles, CRLs, chains, staples and configs.

- Each kind of file has a cap sized for real use: a config 64 MiB, a CRL file 256 MiB,
  certificates, keys and staples 16 MiB. A larger file (sparse, up to 2 GiB) is a clear error
  naming the file and the cap, at once, in `check`, `evaluate` and `pin` — never a trap after
  reading it whole. A policy of 100,000 hosts with two pins each (17 MB) loads.
- Nothing in a certificate, chain or CRL file is skipped: a junk block between certificates is an
  error naming the file and the block, not a bundle silently cut short (and a backup pin lost).
- Names are bytes: a file whose name is not UTF-8 in a `trust` or `certificates` directory is
  read like any other, and `pin` opens such a file.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from conftest import TIMEOUT, pkilib, run

GIB2 = 2 << 30
MIB = 1 << 20


def run_bytes(binary: Path, *args: bytes | str, cwd: Path) -> subprocess.CompletedProcess:
    """Runs pinproxy with arguments that may not be UTF-8."""
    argv = [os.fsencode(str(binary))] + [a if isinstance(a, bytes) else a.encode() for a in args]
    return subprocess.run(argv, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT)


def sparse(path: Path, size: int = GIB2) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def assert_too_large(res, name: str, cap: str = "16 MiB, the cap on certificate and key files") -> None:
    assert res.code > 0, f"expected a clean error exit (not a crash)\n{res}"
    assert name in res.err and f"larger than {cap}" in res.err, res


# ---------------------------------------------------------------- the size cap

@pytest.mark.parametrize("key, value", [
    ("trust", '["huge.pem"]'),
    ("certificates", '["huge.pem"]'),
    ("crls", '["huge.pem"]'),
], ids=["anchor", "pinned-certificate", "crl"])
def test_check_refuses_a_2gib_file(ws, key, value):
    sparse(ws.path("huge.pem"))
    extra = {
        "trust": "",
        "certificates": 'trust = ["root-a.pem"]\npin = "public-key"\n',
        "crls": 'trust = ["root-a.pem"]\nrevocation = "crl"\n',
    }[key]
    cfg = ws.config(f'[hosts."api.test"]\n{extra}{key} = {value}\n')
    res = ws.check(cfg)
    assert res.code == 1, res
    assert_too_large(res, '"huge.pem"', "256 MiB, the cap on CRL files" if key == "crls" else
                     "16 MiB, the cap on certificate and key files")
    assert f"{cfg}:" in res.err, res


@pytest.mark.parametrize("size", [GIB2, 64 * MIB + 1], ids=["2gib", "just-over-64mib"])
def test_check_refuses_a_config_over_64mib(ws, size):
    cfg = sparse(ws.path("huge.toml"), size)
    res = ws.check(cfg)
    assert res.code == 1, res
    assert f"{cfg}: the config file is larger than 64 MiB, the cap on config files" in res.err, res


def pin(i: int, j: int) -> str:
    return "sha256/" + base64.b64encode(hashlib.sha256(f"{i}/{j}".encode()).digest()).decode()


def test_a_policy_of_100000_hosts_with_two_pins_each_loads(ws):
    """17 MB: over the 16 MiB that once capped every file, well under the config's 64 MiB."""
    cfg = ws.path("large.toml")
    with open(cfg, "w") as out:
        for i in range(100_000):
            out.write(f'[hosts."h{i}.example.test"]\npin = "public-key"\npins = ["{pin(i, 0)}", "{pin(i, 1)}"]\n\n')
    assert 16 * MIB < cfg.stat().st_size < 64 * MIB
    # A debug build on a busy machine takes seconds: the bound is generous.
    res = run(ws.bin, "check", "--config", cfg, cwd=ws.cwd, timeout=180)
    assert res.code == 0, res.err[:2000]
    assert "hosts: 100000 entries, 100000 pinned with 200000 pins" in res.out, res.out[:2000]


def test_a_crl_file_over_16mib_loads_and_one_over_256mib_is_refused(ws):
    """A CRL bundle padded with text between its blocks to just over 16 MiB is read whole (its
    CRLs count); one just over 256 MiB (sparse) is refused, naming the cap."""
    padding = b"# " + b"x" * 1000 + b"\n"
    ws.write("padded-crls.pem", ws.path("crl-root-b.pem").read_bytes() + padding * (16 * MIB // len(padding) + 1)
             + ws.path("crl-int-a.pem").read_bytes())
    assert 16 * MIB < ws.path("padded-crls.pem").stat().st_size < 256 * MIB
    cfg = ws.config('[hosts."api.test"]\ntrust = ["root-a.pem"]\nrevocation = "crl"\ncrls = ["padded-crls.pem"]\n')
    res = ws.check(cfg)
    assert res.code == 0, res
    # The CRL after the padding is the one that revokes.
    assert ws.evaluate(cfg, "api.test", "api-chain.pem").first == "allow"
    res = ws.evaluate(cfg, "api.test", "revoked-chain.pem")
    assert res.first == "refuse: revoked", res
    sparse(ws.path("huge-crls.pem"), 256 * MIB + 1)
    cfg = ws.config('[hosts."api.test"]\ntrust = ["root-a.pem"]\nrevocation = "crl"\ncrls = ["huge-crls.pem"]\n')
    res = ws.check(cfg)
    assert res.code == 1, res
    assert_too_large(res, '"huge-crls.pem"', "256 MiB, the cap on CRL files")


def test_evaluate_refuses_a_2gib_chain_and_staple(ws):
    cfg = ws.config('[hosts."api.test"]\ntrust = ["root-a.pem"]\n')
    sparse(ws.path("huge.pem"))
    res = ws.evaluate(cfg, "api.test", "huge.pem")
    assert res.code == 2, res
    assert_too_large(res, "huge.pem")
    res = ws.evaluate(cfg, "api.test", "api-chain.pem", staple="huge.pem")
    assert res.code == 2, res
    assert_too_large(res, "huge.pem", "16 MiB, the cap on OCSP staple files")


def test_pin_refuses_a_2gib_file(ws):
    sparse(ws.path("huge.pem"))
    res = ws.pin(ws.path("huge.pem"), ws.path("api.pem"))
    assert_too_large(res, "huge.pem")
    # The other file is still read.
    assert ws.pki.spki("api") in res.out, res


def test_a_file_just_under_the_cap_is_read(ws):
    """The cap is on size, not on content: a bundle padded with explanatory text to just under
    16 MiB is read whole; one byte more is refused."""
    pem = ws.path("api-chain.pem").read_bytes()
    padding = b"# " + b"x" * 1000 + b"\n"
    count = (16 * 1024 * 1024 - 2 * len(pem)) // len(padding)
    ws.write("padded.pem", pem + padding * count + ws.path("root-a.pem").read_bytes())
    assert ws.path("padded.pem").stat().st_size < 16 << 20
    res = ws.pin(ws.path("padded.pem"))
    assert res.code == 0, res
    assert ws.pki.spki("root-a") in res.out, res
    with open(ws.path("padded.pem"), "ab") as f:
        f.write(b"#" * (16 * MIB + 1 - ws.path("padded.pem").stat().st_size))
    assert_too_large(ws.pin(ws.path("padded.pem")), "padded.pem")


# ---------------------------------------------------------------- nothing skipped

JUNK = b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"


def junk_bundle(ws) -> Path:
    """api, int-a, a junk block, then api-newkey (the backup pin) — the issue's reproduction."""
    return ws.write("bundle.pem", ws.path("api.pem").read_bytes() + ws.path("int-a.pem").read_bytes() + JUNK
                    + ws.path("api-newkey.pem").read_bytes())


def test_check_names_the_junk_block(ws):
    junk_bundle(ws)
    cfg = ws.config('[hosts."api.test"]\ntrust = ["root-a.pem"]\npin = "public-key"\ncertificates = ["bundle.pem"]\n')
    res = ws.check(cfg)
    assert res.code == 1, res
    api_lines = len(ws.path("api.pem").read_text().splitlines())
    int_lines = len(ws.path("int-a.pem").read_text().splitlines())
    assert f'{cfg}:4: pinned certificate "bundle.pem" holds a PEM block that is not a valid certificate ' \
           f'(block 3, line {api_lines + int_lines + 1})' in res.err, res


def test_pin_names_the_junk_block(ws):
    junk_bundle(ws)
    res = ws.pin(ws.path("bundle.pem"))
    assert res.code == 1, res
    assert "bundle.pem" in res.err and "block 3" in res.err, res


def test_evaluate_refuses_a_chain_with_a_junk_block(ws):
    cfg = ws.config('[hosts."api.test"]\ntrust = ["root-a.pem"]\n')
    ws.write("chain.pem", ws.path("api-chain.pem").read_bytes() + b"-----BEGIN CERTIFICATE-----\n!!!\n")
    res = ws.evaluate(cfg, "api.test", "chain.pem")
    assert res.code == 2, res
    assert "chain.pem" in res.err and "block 3" in res.err, res


def test_crl_bundle_with_a_junk_block(ws):
    ws.write("crls.pem", ws.path("crl-root-b.pem").read_bytes() + b"-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n"
             + ws.path("crl-int-a.pem").read_bytes())
    cfg = ws.config('[hosts."api.test"]\ntrust = ["root-a.pem"]\nrevocation = "crl"\ncrls = ["crls.pem"]\n')
    res = ws.check(cfg)
    assert res.code == 1, res
    assert '"crls.pem" holds a PEM block that is not a valid CRL (block 2' in res.err, res


# ---------------------------------------------------------------- names that are not UTF-8

NOT_UTF8 = b"root-\xff\xfe.pem"


def test_directory_entry_that_is_not_utf8(ws, pinproxy):
    """Anchors and pinned certificates in directories whose entries include a name that is not
    UTF-8: the config loads and that file counts like any other."""
    anchors = ws.path("odd-anchors")
    anchors.mkdir()
    with open(os.path.join(os.fsencode(anchors), NOT_UTF8), "wb") as f:
        f.write(ws.path("root-a.pem").read_bytes())
    pinned = ws.path("odd-pinned")
    pinned.mkdir()
    with open(os.path.join(os.fsencode(pinned), b"leaf-\xe9.pem"), "wb") as f:
        f.write(ws.path("api.pem").read_bytes())
    (pinned / "backup.pem").write_bytes(ws.path("api-newkey.pem").read_bytes())
    cfg = ws.config('[hosts."api.test"]\ntrust = ["odd-anchors"]\npin = "public-key"\ncertificates = ["odd-pinned"]\n')
    res = ws.check(cfg)
    assert res.code == 0, res
    assert "2 pins" in res.out, res
    # The anchor behind the odd name is the one the chain verifies to.
    res = ws.evaluate(cfg, "api.test", "api-chain.pem")
    assert res.first == "allow", res


def test_a_broken_file_with_an_odd_name_is_named(ws):
    anchors = ws.path("odd-anchors")
    anchors.mkdir()
    with open(os.path.join(os.fsencode(anchors), NOT_UTF8), "wb") as f:
        f.write(b"not a certificate\n")
    cfg = ws.config('[hosts."api.test"]\ntrust = ["odd-anchors"]\n')
    res = ws.check(cfg)
    assert res.code == 1, res
    assert '"odd-anchors/root-\\xFF\\xFE.pem" holds no PEM or DER certificate' in res.err, res


def test_pin_opens_a_file_whose_name_is_not_utf8(ws, pinproxy):
    with open(os.path.join(os.fsencode(ws.dir), NOT_UTF8), "wb") as f:
        f.write(ws.path("api-chain.pem").read_bytes())
    p = run_bytes(pinproxy, "pin", NOT_UTF8, cwd=ws.dir)
    assert p.returncode == 0, p
    out = p.stdout.decode()
    assert ws.pki.spki("api") in out and ws.pki.spki("int-a") in out, out
    assert "root-\\xFF\\xFE.pem [0]" in out, out
