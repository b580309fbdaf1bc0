"""`pinproxy pin FILE...` and `pinproxy pin --connect HOST[:PORT]`."""

from __future__ import annotations

import re
import socket
import tomllib

import pytest

from conftest import PIN_RE, pkilib

SPKI_LINE = re.compile(r"public-key:\s*(" + PIN_RE + r")")
CERT_LINE = re.compile(r"certificate:\s*(" + PIN_RE + r")")


def pins_in(out: str) -> tuple[list[str], list[str]]:
    return SPKI_LINE.findall(out), CERT_LINE.findall(out)


def expect_pins(res, pki, stems):
    assert res.code == 0, res
    spkis, certs = pins_in(res.out)
    assert spkis == [pki.spki(s) for s in stems], res
    assert certs == [pki.cert(s) for s in stems], res


# ---------------------------------------------------------------- files

FILE_CASES = [
    # (id, file, stems in order)
    ("single-pem", "api.pem", ["api"]),
    ("der", "api.der", ["api"]),
    ("chain", "api-chain.pem", ["api", "int-a"]),
    ("fullchain", "api-fullchain.pem", ["api", "int-a", "root-a"]),
    ("rsa-root", "root-b.pem", ["root-b"]),
    ("rsa-leaf-chain", "api-rsa-chain.pem", ["api-rsa", "int-a"]),
    ("rotated-same-key", "api-rotated.pem", ["api-rotated"]),
    ("self-signed", "self.pem", ["self"]),
    ("deep-chain", "deep-chain.pem", ["deep", "int-sub", "int-pathlen0"]),
    ("mixed-chain", "mixed-chain.pem", ["untrusted", "int-a"]),
    ("crt-in-dir", "anchors-mixed/root-a.crt", ["root-a"]),
    ("DER-uppercase-ext", "anchors-mixed/root-b.DER", ["root-b"]),
]


@pytest.mark.parametrize("name,stems", [c[1:] for c in FILE_CASES], ids=[c[0] for c in FILE_CASES])
def test_pin_file(ws, pki, name, stems):
    expect_pins(ws.pin(ws.path(name)), pki, stems)


def test_pin_prints_subject_issuer_not_after(ws, pki):
    res = ws.pin(ws.path("api.pem"))
    assert res.code == 0, res
    assert "api.test" in res.out, res
    assert pkilib.INT_A_CN in res.out, res  # issuer
    assert "2045" in res.out, res  # not-after year


def test_pin_prints_subject_issuer_not_after_for_every_cert(ws, pki):
    res = ws.pin(ws.path("api-fullchain.pem"))
    assert res.code == 0, res
    for cn in (pkilib.INT_A_CN, pkilib.ROOT_A_CN):
        assert cn in res.out, res
    res = ws.pin(ws.path("expired.pem"))
    assert res.code == 0, res
    assert "2015" in res.out, res


def test_pin_rotated_cert_same_key_pin_differs_only_in_cert_pin(pki):
    # Sanity of the fixture itself: cross-checks pins.json with the PKI objects.
    assert pki.spki("api") == pki.spki("api-rotated")
    assert pki.cert("api") != pki.cert("api-rotated")
    assert pki.spki("self") == pki.spki("self-rekeyed")
    assert pki.spki("api") != pki.spki("api-newkey")


def test_pin_several_files(ws, pki):
    res = ws.pin(ws.path("api.pem"), ws.path("root-b.pem"), ws.path("api.der"))
    expect_pins(res, pki, ["api", "root-b", "api"])


@pytest.mark.parametrize(
    "src,dest",
    [
        ("api.pem", "upper.PEM"),
        ("api.pem", "bundle.crt"),
        ("api.pem", "bundle.CRT"),
        ("api.pem", "pem-content.cer"),
        ("api.der", "der-content.cer"),
        ("api.der", "der-content.CER"),
        ("api.der", "upper.DER"),
        ("api.der", "Mixed.Der"),
    ],
)
def test_pin_extensions_any_case(ws, pki, src, dest):
    ws.write(dest, ws.path(src).read_bytes())
    expect_pins(ws.pin(ws.path(dest)), pki, ["api"])


def test_pin_relative_path_against_cwd(ws, pki):
    res = ws.run("pin", "api-chain.pem", cwd=ws.dir)
    expect_pins(res, pki, ["api", "int-a"])


@pytest.mark.parametrize(
    "name,content",
    [
        pytest.param("missing.pem", None, id="missing"),
        pytest.param("garbage.pem", b"this is not a certificate\n", id="garbage-text"),
        pytest.param("garbage.der", b"\x30\x03\x02\x01", id="garbage-der"),
        pytest.param("empty.pem", b"", id="empty"),
        pytest.param("truncated.pem", None, id="truncated-pem"),  # first half of a PEM certificate
    ],
)
def test_pin_bad_file(ws, name, content):
    p = ws.path(name)
    if name == "truncated.pem":
        data = ws.path("api.pem").read_bytes()
        ws.write(name, data[: len(data) // 2])
    elif content is not None:
        ws.write(name, content)
    res = ws.pin(p)
    assert res.code != 0, res
    assert str(p) in res.err, res


def test_pin_bad_file_among_good_ones(ws):
    p = ws.path("nope.pem")
    res = ws.pin(ws.path("api.pem"), p)
    assert res.code != 0, res
    assert str(p) in res.err, res


def test_pin_no_arguments_is_an_error(ws):
    res = ws.pin()
    assert res.code != 0, res


# ---------------------------------------------------------------- --connect


def paste_block(out: str, pattern: str) -> dict:
    """Parse the ready-to-paste TOML block starting at [hosts."PATTERN"] (longest parseable prefix)."""
    lines = out.splitlines()
    header = f'[hosts."{pattern}"]'
    starts = [i for i, l in enumerate(lines) if l.strip() == header]
    assert starts, f"no line {header!r} in:\n{out}"
    start = starts[0]
    for end in range(len(lines), start, -1):
        try:
            doc = tomllib.loads("\n".join(lines[start:end]))
        except tomllib.TOMLDecodeError:
            continue
        entry = doc.get("hosts", {}).get(pattern, {})
        if "pins" in entry:
            return entry
    raise AssertionError(f"no parseable block with pins after {header!r} in:\n{out}")


def check_connect_output(res, pki, pattern, chain_stems):
    assert res.code == 0, res
    spkis, certs = pins_in(res.out)
    for s in chain_stems:
        assert pki.spki(s) in spkis, res
        assert pki.cert(s) in certs, res
    block = paste_block(res.out, pattern)
    assert block.get("pin") == "public-key", res
    for s in chain_stems:
        assert pki.spki(s) in block["pins"], res
    for p in block["pins"]:
        assert re.fullmatch(PIN_RE, p), p


def test_connect_ip_literal(ws, pki, tls_server):
    srv = tls_server("api-chain.pem", "api.key")
    res = ws.pin("--connect", f"127.0.0.1:{srv.port}")
    check_connect_output(res, pki, "127.0.0.1", ["api", "int-a"])
    assert srv.wait_handshake(), f"the server saw no completed handshake: {srv.errors}"
    assert srv.sni and all(s is None for s in srv.sni), f"SNI sent for an IP literal: {srv.sni}"


def test_connect_self_signed(ws, pki, tls_server):
    # pin --connect collects pins: it must not require a trusted chain.
    srv = tls_server("self.pem", "self.key")
    res = ws.pin("--connect", f"127.0.0.1:{srv.port}")
    check_connect_output(res, pki, "127.0.0.1", ["self"])


def _localhost_loopback_addresses() -> list[str] | None:
    try:
        infos = socket.getaddrinfo("localhost", None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return None
    addrs = sorted({ai[4][0] for ai in infos})
    import ipaddress

    if not addrs or not all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs):
        return None
    return addrs


def test_connect_name_sends_sni(ws, pki, tls_server):
    addrs = _localhost_loopback_addresses()
    if addrs is None:
        pytest.skip("localhost does not resolve only to loopback addresses here")
    srv = tls_server("api-chain.pem", "api.key", addresses=addrs)
    res = ws.pin("--connect", f"localhost:{srv.port}")
    check_connect_output(res, pki, "localhost", ["api", "int-a"])
    assert "localhost" in srv.sni, f"SNI seen by the server: {srv.sni}"


def test_connect_refused(ws):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    res = ws.pin("--connect", f"127.0.0.1:{port}")
    assert res.code != 0, res


def _try_servers(tls_server, addresses, port):
    try:
        return tls_server("api-chain.pem", "api.key", addresses=addresses, port=port)
    except (OSError, RuntimeError) as e:
        pytest.skip(f"cannot listen on {addresses} port {port}: {e}")


def test_connect_default_port_is_443(ws, pki, tls_server):
    srv = _try_servers(tls_server, ("127.0.0.1",), 443)
    res = ws.pin("--connect", "127.0.0.1")
    check_connect_output(res, pki, "127.0.0.1", ["api", "int-a"])
    assert srv.wait_handshake(), f"the server saw no completed handshake: {srv.errors}"


def test_connect_ipv6_literal(ws, pki, tls_server):
    srv = _try_servers(tls_server, ("::1",), 0)
    res = ws.pin("--connect", f"[::1]:{srv.port}")
    assert res.code == 0, res
    # The block's pattern may be written with or without brackets.
    header = '[hosts."::1"]' if '[hosts."::1"]' in res.out else '[hosts."[::1]"]'
    check_connect_output(res, pki, header[8:-2], ["api", "int-a"])
    assert srv.sni and all(s is None for s in srv.sni), f"SNI sent for an IP literal: {srv.sni}"


# ---------------------------------------------------------------- the generator itself


def _structure(d):
    out = {}
    for p in sorted(d.rglob("*")):
        rel = str(p.relative_to(d))
        if p.is_dir():
            out[rel] = "dir"
            continue
        if p.suffix in (".pem", ".crt", ".der", ".DER") and not p.name.startswith(("crl-", "ocsp-")):
            out[rel] = [
                (c.subject.rfc4514_string(), c.issuer.rfc4514_string(), c.not_valid_before_utc, c.not_valid_after_utc,
                 [e.oid.dotted_string for e in c.extensions])
                for c in pkilib.load_certs(p)
            ]
        else:
            out[rel] = "file"
    return out


def test_generator_cli_is_deterministic_in_structure(tmp_path):
    import subprocess
    import sys

    for n in ("one", "two"):
        subprocess.run([sys.executable, str(pkilib.__file__), str(tmp_path / n)], check=True, timeout=60)
    one, two = _structure(tmp_path / "one"), _structure(tmp_path / "two")
    assert one == two
    import json

    pins1 = json.loads((tmp_path / "one" / "pins.json").read_text())
    pins2 = json.loads((tmp_path / "two" / "pins.json").read_text())
    assert sorted(pins1) == sorted(pins2)
    assert pins1["api"]["spki"] != pins2["api"]["spki"]  # fresh keys each run
