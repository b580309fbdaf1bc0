"""The files pinproxy reads: certificates, bundles, CRLs, chains, staples and configs.

- Nothing larger than 16 MiB is read: a 2 GiB file (sparse) is a clear error naming the file,
  at once, in `check`, `evaluate` and `pin` — never a trap after reading it whole.
- Nothing in a certificate, chain or CRL file is skipped: a junk block between certificates is an
  error naming the file and the block, not a bundle silently cut short (and a backup pin lost).
- Names are bytes: a file whose name is not UTF-8 in a `trust` or `certificates` directory is
  read like any other, and `pin` opens such a file.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import TIMEOUT, pkilib

GIB2 = 2 << 30


def run_bytes(binary: Path, *args: bytes | str, cwd: Path) -> subprocess.CompletedProcess:
    """Runs pinproxy with arguments that may not be UTF-8."""
    argv = [os.fsencode(str(binary))] + [a if isinstance(a, bytes) else a.encode() for a in args]
    return subprocess.run(argv, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT)


def sparse(path: Path, size: int = GIB2) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def assert_too_large(res, name: str) -> None:
    assert res.code > 0, f"expected a clean error exit (not a crash)\n{res}"
    assert name in res.err and "larger than 16 MiB" in res.err, res


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
    assert_too_large(res, '"huge.pem"')
    assert f"{cfg}:" in res.err, res


def test_check_refuses_a_2gib_config(ws):
    cfg = sparse(ws.path("huge.toml"))
    res = ws.check(cfg)
    assert_too_large(res, str(cfg))


def test_evaluate_refuses_a_2gib_chain_and_staple(ws):
    cfg = ws.config('[hosts."api.test"]\ntrust = ["root-a.pem"]\n')
    sparse(ws.path("huge.pem"))
    res = ws.evaluate(cfg, "api.test", "huge.pem")
    assert res.code == 2, res
    assert_too_large(res, "huge.pem")
    res = ws.evaluate(cfg, "api.test", "api-chain.pem", staple="huge.pem")
    assert res.code == 2, res
    assert_too_large(res, "huge.pem")


def test_pin_refuses_a_2gib_file(ws):
    sparse(ws.path("huge.pem"))
    res = ws.pin(ws.path("huge.pem"), ws.path("api.pem"))
    assert_too_large(res, "huge.pem")
    # The other file is still read.
    assert ws.pki.spki("api") in res.out, res


def test_a_file_just_under_the_cap_is_read(ws):
    """The cap is on size, not on content: a bundle padded with explanatory text to just under
    16 MiB is read whole."""
    pem = ws.path("api-chain.pem").read_bytes()
    padding = b"# " + b"x" * 1000 + b"\n"
    count = (16 * 1024 * 1024 - 2 * len(pem)) // len(padding)
    ws.write("padded.pem", pem + padding * count + ws.path("root-a.pem").read_bytes())
    assert ws.path("padded.pem").stat().st_size < 16 << 20
    res = ws.pin(ws.path("padded.pem"))
    assert res.code == 0, res
    assert ws.pki.spki("root-a") in res.out, res


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
