"""`trust = ["system", FILE…]`: the operating system's store plus the listed anchors.

The test decides what "system" holds: SSL_CERT_FILE names a bundle with root B only, so a
chain to root A verifies only through the listed file, a chain to root B only through the
"system" store, and a self-signed certificate through neither.
"""

from __future__ import annotations

import os

import subprocess

import pytest

from conftest import AT, TIMEOUT, Result
from proxy_harness import (
    API,
    Tunnel,
    expect_refusal,
    make_proxy,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
)

import origin as originlib

SYSTEM_PLUS_A = '["system", "root-a.pem"]'


def run_with_system(ws, *args) -> Result:
    """pinproxy with a "system" store that holds root B alone."""
    env = {"PATH": "/usr/bin:/bin", "SSL_CERT_FILE": str(ws.path("root-b.pem")), "SSL_CERT_DIR": str(ws.path("no-such-dir"))}
    # Under scripts/test --sanitize, the sanitizer's settings (report files, suppressions) too.
    env.update({k: v for k, v in os.environ.items() if k.endswith("SAN_OPTIONS")})
    argv = [str(ws.bin), *map(str, args)]
    p = subprocess.run(argv, cwd=ws.cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    return Result(p.returncode, p.stdout, p.stderr, argv)


def evaluate(ws, cfg, host: str, chain: str) -> Result:
    return run_with_system(ws, "evaluate", "--config", cfg, "--host", host, "--chain", ws.path(chain), "--at", AT)


@pytest.mark.parametrize("host, chain, expect", [
    pytest.param("api.test", "api-chain.pem", "allow", id="chain-to-the-listed-root"),
    pytest.param("api.test", "untrusted-chain.pem", "allow", id="chain-to-a-system-root"),
    pytest.param("self.test", "self.pem", "refuse: untrusted-chain", id="chain-to-neither"),
])
def test_system_plus_listed(ws, host, chain, expect):
    cfg = ws.config(f'[default]\ntrust = {SYSTEM_PLUS_A}\n')
    res = evaluate(ws, cfg, host, chain)
    assert res.first == expect, res


def test_each_half_alone_is_narrower(ws):
    """The same chains against "system" alone and the listed file alone: each refuses one of
    them, so the list really is the union."""
    system_only = ws.config('[default]\ntrust = "system"\n', name="system.toml")
    listed_only = ws.config('[default]\ntrust = ["root-a.pem"]\n', name="listed.toml")
    assert evaluate(ws, system_only, "api.test", "api-chain.pem").first == "refuse: untrusted-chain"
    assert evaluate(ws, system_only, "api.test", "untrusted-chain.pem").first == "allow"
    assert evaluate(ws, listed_only, "api.test", "untrusted-chain.pem").first == "refuse: untrusted-chain"
    assert evaluate(ws, listed_only, "api.test", "api-chain.pem").first == "allow"


def test_a_listed_intermediate_ends_the_path(ws):
    """Anchor rules for the listed files stay as they are: an intermediate listed beside
    "system" is an anchor of its own."""
    cfg = ws.config('[hosts."api.test"]\ntrust = ["system", "int-a.pem"]\n')
    assert evaluate(ws, cfg, "api.test", "api-chain.pem").first == "allow"
    # Not the root behind it: a chain through root A's other branches is not trusted.
    assert evaluate(ws, cfg, "api.test", "deep-chain.pem").first == "refuse: untrusted-chain"


def test_system_alone_in_a_list_is_system(ws):
    cfg = ws.config('[default]\ntrust = ["system"]\n')
    assert evaluate(ws, cfg, "api.test", "untrusted-chain.pem").first == "allow"
    assert evaluate(ws, cfg, "api.test", "api-chain.pem").first == "refuse: untrusted-chain"


def test_check_says_which_entries_use_which_anchors(ws):
    cfg = ws.config(f"""
        [hosts."api.test"]
        trust = {SYSTEM_PLUS_A}
        [hosts."www.api.test"]
        trust = {SYSTEM_PLUS_A}
        [hosts."b.test"]
        trust = ["root-b.pem"]
        [hosts."c.test"]
        trust = "system"
        """)
    res = run_with_system(ws, "check", "--config", cfg)
    assert res.code == 0, res
    root_a = "CN=pinproxy test root A,O=pinproxy tests"
    root_b = "CN=pinproxy test root B,O=pinproxy tests"
    lines = res.out.splitlines()
    start = lines.index("anchors:")
    assert lines[start + 1:start + 4] == [
        "  system: default and 1 entry",
        f"  system + {root_a}: 2 entries",
        f"  {root_b}: 1 entry",
    ], res
    assert any(l.split() [:1] == ["api.test"] and l.endswith(f"trust system + {root_a}") for l in lines), res


def test_a_missing_listed_file_is_named(ws):
    cfg = ws.config('[hosts."api.test"]\ntrust = ["system", "corp-root.pem"]\n')
    res = run_with_system(ws, "check", "--config", cfg)
    assert res.code == 1, res
    assert f'{cfg}:2: anchor "corp-root.pem" does not exist' in res.err, res


def test_daemon_trusts_system_plus_listed(make_proxy, origins, pki, monkeypatch):
    """The daemon itself: root A listed, root B in its "system" store, both allowed; a host
    served by a self-signed certificate is refused untrusted-chain."""
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.path("root-b.pem")))
    monkeypatch.setenv("SSL_CERT_DIR", "/nonexistent")
    mitm = originlib.TLSOrigin(pki.path("expired-selfsigned.pem"), pki.path("expired-selfsigned.key"), name="selfsigned")
    try:
        p = make_proxy(
            proxy={"allow_ports": [origins.api.port, origins.untrusted.port, mitm.port]},
            resolve={API: "127.0.0.1", "mitm.test": "127.0.0.1"},
            default={"trust": ["system", "root-a.pem"]},
        )
        for port in (origins.api.port, origins.untrusted.port):
            with Tunnel(p, API, port) as t:
                assert t.get("/small") == (200, originlib.SMALL_BODY)
        expect_refusal(p, "mitm.test", mitm.port, "untrusted-chain")
    finally:
        mitm.close()
