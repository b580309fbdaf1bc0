"""Certificate Transparency (`ct`, `[proxy] ct_log_list`): Chrome's policy on SCTs that
OpenSSL validated, through `evaluate` (offline) and through the daemon.

No public log is reachable, so the logs are ours (ct_pki.py): operators A (two logs), B and C,
a log of B retired 5 days ago, and a log the list does not name. The "system store" is a bundle
of our own root given through SSL_CERT_FILE; a corporate root is listed beside it. The daemon is
tried on both listeners: CONNECT, and the transparent listener behind the egress lock (in a fresh
network namespace, capture_harness.py).
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

import ct_pki as ct
import origin as originlib
from capture_harness import capture, public_dir  # noqa: F401 (fixtures)
import pki as pkilib
from conftest import TIMEOUT, Result
from proxy_harness import free_port, poll, port_accepts
from proxy_harness import Tunnel, expect_refusal, make_proxy, origins  # noqa: F401 (fixtures)

DAY = dt.timedelta(days=1)


@dataclass
class World:
    dir: Path
    root: pkilib.Issued
    inter: pkilib.Issued
    corp: pkilib.Issued
    a1: ct.Log
    a2: ct.Log
    b1: ct.Log
    c1: ct.Log
    retired: ct.Log
    unknown: ct.Log

    def leaf(self, name: str, *specs: ct.SCTSpec, issuer: pkilib.Issued | None = None, **kw) -> Path:
        """A chain file for `name` with `specs` embedded."""
        issuer = issuer or self.inter
        leaf = ct.issue_leaf(issuer, name, specs, **kw)
        chain = [leaf] + ([issuer] if issuer is self.inter else [])
        ct.write_pem(self.dir / f"{name}.pem", *chain)
        (self.dir / f"{name}.key").write_bytes(pkilib.key_pem(leaf.key))
        self.issued = getattr(self, "issued", {})
        self.issued[name] = leaf
        return self.dir / f"{name}.pem"

    def write_list(self, name: str = "ct-log-list.json", published: dt.datetime | None = None) -> Path:
        path = self.dir / name
        path.write_text(ct.log_list([self.a1, self.a2, self.b1, self.c1, self.retired], published))
        return path

    def config(self, entry: str = 'ct = "enforce"', proxy: str | None = None, name: str = "pinproxy.toml") -> Path:
        path = self.dir / name
        proxy = proxy if proxy is not None else f'ct_log_list = "{self.dir / "ct-log-list.json"}"'
        path.write_text(f"[proxy]\n{proxy}\n\n[default]\ntrust = \"system\"\n{entry}\n\n"
                        f"[hosts.\"corp.test\"]\ntrust = [\"system\", \"corp-root.pem\"]\n{entry}\n")
        return path

    @property
    def env(self) -> dict[str, str]:
        env = {"PATH": "/usr/bin:/bin", "SSL_CERT_FILE": str(self.dir / "system.pem"), "SSL_CERT_DIR": str(self.dir / "none")}
        env.update({k: v for k, v in os.environ.items() if k.endswith("SAN_OPTIONS")})
        return env


@pytest.fixture
def world(tmp_path) -> World:
    root = pkilib.make_root("ct test root")
    inter = pkilib.make_intermediate("ct test intermediate", root)
    corp = pkilib.make_root("ct test corporate root")
    pkilib.write_pem(tmp_path / "system.pem", root.cert)
    pkilib.write_pem(tmp_path / "corp-root.pem", corp.cert)
    w = World(tmp_path, root, inter, corp,
              a1=ct.Log("A one", "Operator A"), a2=ct.Log("A two", "Operator A"), b1=ct.Log("B one", "Operator B"),
              c1=ct.Log("C one", "Operator C"),
              retired=ct.Log("B old", "Operator B", state="retired", state_since=ct.now() - 5 * DAY),
              unknown=ct.Log("nobody's", "Operator X"))
    w.write_list()
    return w


@pytest.fixture
def daemon_world(world, monkeypatch) -> World:
    """The world, with the daemons the test starts trusting its system store (and only that)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(world.dir / "system.pem"))
    monkeypatch.setenv("SSL_CERT_DIR", str(world.dir / "none"))
    return world


def run(pinproxy: Path, w: World, *args) -> Result:
    argv = [str(pinproxy), *map(str, args)]
    p = subprocess.run(argv, cwd=w.dir, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT, env=w.env)
    return Result(p.returncode, p.stdout, p.stderr, argv)


def evaluate(pinproxy, w: World, host: str, chain: Path, cfg: Path | None = None, *extra) -> Result:
    return run(pinproxy, w, "evaluate", "--config", cfg or w.config(), "--host", host, "--chain", chain, *extra)


def scts(res: Result) -> list[str]:
    return [line.strip()[len("sct: "):] for line in res.out.splitlines() if line.strip().startswith("sct: ")]


# --------------------------------------------------------------------------------------------
# evaluate, offline

def test_embedded_scts_of_two_operators_comply(pinproxy, world):
    w = world
    res = evaluate(pinproxy, w, "ok.test", w.leaf("ok.test", ct.SCTSpec(w.a1), ct.SCTSpec(w.b1)))
    assert res.first == "allow" and res.code == 0, res
    assert "certificate transparency: compliant: 2 embedded SCTs from 2 operators (2 needed)" in res.out, res
    assert [re.sub(r"time=\S+ ", "", s) for s in scts(res)] == [
        'log="A one" operator="Operator A" source=embedded counted',
        'log="B one" operator="Operator B" source=embedded counted',
    ], res


def test_scts_in_the_tls_extension_comply(pinproxy, world):
    w = world
    chain = w.leaf("tls.test")
    tls = w.dir / "tls.scts"
    tls.write_bytes(ct.tls_scts(w.issued["tls.test"], [ct.SCTSpec(w.a1), ct.SCTSpec(w.c1)]))
    res = evaluate(pinproxy, w, "tls.test", chain, None, "--tls-scts", tls)
    assert res.first == "allow", res
    assert all(s.endswith("source=tls-extension counted") for s in scts(res)) and len(scts(res)) == 2, res
    # The same certificate without them: nothing to count.
    res = evaluate(pinproxy, w, "tls.test", chain)
    assert res.first == "refuse: ct-missing", res
    assert "no SCT was presented" in res.out, res


def test_scts_in_a_stapled_ocsp_response_comply(pinproxy, world):
    w = world
    chain = w.leaf("ocsp.test")
    staple = w.dir / "ocsp.der"
    staple.write_bytes(ct.ocsp_staple(w.issued["ocsp.test"], w.inter, [ct.SCTSpec(w.a1), ct.SCTSpec(w.c1)]))
    res = evaluate(pinproxy, w, "ocsp.test", chain, None, "--staple", staple)
    assert res.first == "allow", res
    assert "certificate transparency: compliant: 2 SCTs from the TLS handshake or the OCSP staple, from 2 operators" in res.out, res
    assert all(s.endswith("source=ocsp counted") for s in scts(res)) and len(scts(res)) == 2, res
    # Two SCTs of one operator in the staple: not enough.
    staple.write_bytes(ct.ocsp_staple(w.issued["ocsp.test"], w.inter, [ct.SCTSpec(w.a1), ct.SCTSpec(w.a2)]))
    res = evaluate(pinproxy, w, "ocsp.test", chain, None, "--staple", staple)
    assert res.first == "refuse: ct-missing", res
    assert "TLS/OCSP SCTs: 1 of 2 operators" in res.out, res


def test_a_long_lived_certificate_needs_three_logs(pinproxy, world):
    w = world
    two = w.leaf("long2.test", ct.SCTSpec(w.a1), ct.SCTSpec(w.b1), lifetime=200 * DAY)
    three = w.leaf("long3.test", ct.SCTSpec(w.a1), ct.SCTSpec(w.b1), ct.SCTSpec(w.c1), lifetime=200 * DAY)
    res = evaluate(pinproxy, w, "long2.test", two)
    assert res.first == "refuse: ct-missing" and "2 of 3 logs" in res.out, res
    assert evaluate(pinproxy, w, "long3.test", three).first == "allow"


@pytest.mark.parametrize("name, specs, why", [
    pytest.param("short.test", lambda w: [ct.SCTSpec(w.a1)], "1 of 2 logs", id="one-sct-short"),
    pytest.param("oneop.test", lambda w: [ct.SCTSpec(w.a1), ct.SCTSpec(w.a2)], "1 of 2 operators", id="two-scts-one-operator"),
    pytest.param("badsig.test", lambda w: [ct.SCTSpec(w.a1), ct.SCTSpec(w.b1, corrupt=True)], "1 of 2 logs",
                 id="bad-signature-instead-of-a-good-one"),
    pytest.param("unknown.test", lambda w: [ct.SCTSpec(w.a1), ct.SCTSpec(w.unknown)], "1 of 2 logs", id="unknown-log"),
    pytest.param("retired.test", lambda w: [ct.SCTSpec(w.a1), ct.SCTSpec(w.retired, age=1 * DAY)], "1 of 2 logs",
                 id="log-retired-before-the-sct"),
])
def test_not_enough_qualifying_scts_refuses(pinproxy, world, name, specs, why):
    w = world
    res = evaluate(pinproxy, w, name, w.leaf(name, *specs(w)))
    assert res.first == "refuse: ct-missing" and res.code == 1, res
    assert why in res.out, res


def test_what_does_not_count_says_why(pinproxy, world):
    w = world
    res = evaluate(pinproxy, w, "mixed.test", w.leaf("mixed.test", ct.SCTSpec(w.a1), ct.SCTSpec(w.b1, corrupt=True),
                                                      ct.SCTSpec(w.unknown), ct.SCTSpec(w.retired, age=1 * DAY)))
    found = scts(res)
    assert found[1].endswith("not counted: bad signature"), res
    assert found[2].startswith("log=") and found[2].endswith("not counted: unknown log"), res
    assert "not counted: the log was retired on" in found[3], res


def test_a_bad_signature_beside_enough_good_ones_is_allowed(pinproxy, world):
    w = world
    res = evaluate(pinproxy, w, "extra.test", w.leaf("extra.test", ct.SCTSpec(w.a1), ct.SCTSpec(w.b1, corrupt=True), ct.SCTSpec(w.c1)))
    assert res.first == "allow", res
    assert "not counted: bad signature" in res.out, res


def test_a_log_retired_after_the_sct_still_counts(pinproxy, world):
    w = world
    res = evaluate(pinproxy, w, "before.test", w.leaf("before.test", ct.SCTSpec(w.a1), ct.SCTSpec(w.retired, age=8 * DAY)))
    assert res.first == "allow", res


def test_report_only_and_enforce_false_make_would_refuse_lines(pinproxy, world):
    w = world
    chain = w.leaf("short.test", ct.SCTSpec(w.a1))
    res = evaluate(pinproxy, w, "short.test", chain, w.config('ct = "report-only"', name="report.toml"))
    assert res.first == "allow (would refuse: ct-missing)" and res.code == 0, res
    res = evaluate(pinproxy, w, "short.test", chain, w.config('ct = "enforce"\nenforce = false', name="relaxed.toml"))
    assert res.first == "allow (would refuse: ct-missing)", res


def test_a_chain_to_the_corporate_root_is_not_judged(pinproxy, world):
    w = world
    chain = w.leaf("corp.test", issuer=w.corp)
    res = evaluate(pinproxy, w, "corp.test", chain)
    assert res.first == "allow", res
    assert "certificate transparency: not applied: the chain ends at an anchor outside the system store" in res.out, res
    # The same entry, a chain to the system root without SCTs: judged.
    res = evaluate(pinproxy, w, "corp.test", w.leaf("corp.test", issuer=w.inter))
    assert res.first == "refuse: ct-missing", res


def test_a_list_older_than_70_days_only_reports(pinproxy, world):
    w = world
    w.write_list(published=ct.now() - 71 * DAY)
    cfg = w.config()
    res = evaluate(pinproxy, w, "short.test", w.leaf("short.test", ct.SCTSpec(w.a1)), cfg)
    assert res.first == "allow (would refuse: ct-missing)", res
    assert "days old (more than 70): ct-missing is reported, not enforced" in res.out, res
    check = run(pinproxy, w, "check", "--config", cfg)
    assert check.code == 0, check
    assert re.search(r"warning: the CT log list .* was published 71 days ago", check.err + check.out), check


def test_check_refuses_ct_without_a_usable_list(pinproxy, world):
    w = world
    cfg = w.config(proxy="")
    res = run(pinproxy, w, "check", "--config", cfg)
    assert res.code == 1, res
    assert f'{cfg}:6: default has ct = "enforce" but [proxy] ct_log_list is not set' in res.err, res
    for text, message in [(None, "no such CT log list"), ("{}", "log_list.json v3"), ('{"log_list_timestamp": "x", "operators": []}', "log_list_timestamp")]:
        listed = w.dir / "bad-list.json"
        if text is None:
            listed.unlink(missing_ok=True)
        else:
            listed.write_text(text)
        cfg = w.config(proxy=f'ct_log_list = "{listed}"', name="bad.toml")
        res = run(pinproxy, w, "check", "--config", cfg)
        assert res.code == 1 and message in res.err and "ct_log_list" in res.err, (text, res)
    # Without any ct, a bad list only warns.
    cfg = w.config(entry="", proxy=f'ct_log_list = "{w.dir / "bad-list.json"}"', name="unused.toml")
    res = run(pinproxy, w, "check", "--config", cfg)
    assert res.code == 0 and "warning: ct_log_list" in res.err + res.out, res


def test_check_warns_where_ct_cannot_apply_and_suggests_it(pinproxy, world):
    w = world
    cfg = w.dir / "warn.toml"
    cfg.write_text(f'[proxy]\nct_log_list = "{w.dir / "ct-log-list.json"}"\n\n[default]\ntrust = "system"\n\n'
                   '[hosts."files.test"]\ntrust = ["corp-root.pem"]\nct = "enforce"\n')
    res = run(pinproxy, w, "check", "--config", cfg)
    assert res.code == 0, res
    text = res.err + res.out
    assert 'hosts."files.test": ct has no effect' in text, res
    assert 'trusts the system store without ct (default): consider ct = "enforce"' in text, res


# --------------------------------------------------------------------------------------------
# the daemon

def test_daemon_enforces_embedded_scts(make_proxy, daemon_world):
    w = daemon_world
    good = originlib.TLSOrigin(w.leaf("good.test", ct.SCTSpec(w.a1), ct.SCTSpec(w.b1)), w.dir / "good.test.key", name="ct-good")
    short = originlib.TLSOrigin(w.leaf("short.test", ct.SCTSpec(w.a1)), w.dir / "short.test.key", name="ct-short")
    try:
        p = make_proxy(proxy={"allow_ports": [good.port, short.port], "ct_log_list": str(w.dir / "ct-log-list.json")},
                       resolve={"good.test": "127.0.0.1", "short.test": "127.0.0.1"},
                       default={"trust": "system", "ct": "enforce"})
        for _ in range(2):  # a second connection (resumed, when it can be): the CT answer kept with the chain
            with Tunnel(p, "good.test", good.port) as t:
                assert t.get("/small") == (200, originlib.SMALL_BODY)
                line = p.connection_log(t.client_port)
            assert line["ct"] == "compliant", line
            assert line["scts"].count("counted") == 2, line
        _, line = expect_refusal(p, "short.test", short.port, "ct-missing")
        assert line["ct"] == "ct-missing" and "source=embedded counted" in line["scts"], line
        # A reload reads the list again and forgets what was kept: without operator B's log,
        # the same server no longer complies.
        (w.dir / "ct-log-list.json").write_text(ct.log_list([w.a1, w.a2, w.c1]))
        p.reload()
        _, line = expect_refusal(p, "good.test", good.port, "ct-missing")
        assert "not counted: unknown log" in line["scts"], line
    finally:
        good.close()
        short.close()


class SServer:
    """`openssl s_server -www` on loopback serving `name`'s chain (leaf, then the intermediate)
    with EXTRA options (the SCT extension's -serverinfo, a -status_file staple)."""

    def __init__(self, w: World, name: str, *extra: str):
        leaf, inter = w.dir / f"{name}-leaf.pem", w.dir / "int.pem"
        ct.write_pem(leaf, w.issued[name])
        ct.write_pem(inter, w.inter)
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["openssl", "s_server", "-accept", f"127.0.0.1:{self.port}", "-cert", str(leaf), "-cert_chain", str(inter),
             "-key", str(w.dir / f"{name}.key"), *extra, "-www", "-quiet"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        poll(lambda: self.proc.poll() is None and port_accepts(self.port), what="openssl s_server")

    def close(self):
        self.proc.kill()
        self.proc.wait(TIMEOUT)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl s_server")
@pytest.mark.parametrize("version", ["-tls1_3", "-tls1_2"])
@pytest.mark.parametrize("delivery", ["tls-extension", "ocsp"])
def test_daemon_counts_scts_delivered_beside_the_certificate(make_proxy, daemon_world, delivery, version):
    """SCTs of operators A and C in the TLS extension (`-serverinfo`) or in the stapled OCSP
    response (`-status_file`). The second connection, after a reload, resumes the upstream
    session (no SCT extension or staple comes again) in a new config generation (nothing kept
    with the chain): the SCTs its full handshake delivered still count."""
    w = daemon_world
    w.leaf("beside.test")
    leaf, specs = w.issued["beside.test"], [ct.SCTSpec(w.a1), ct.SCTSpec(w.c1)]
    if delivery == "tls-extension":
        option, path = "-serverinfo", w.dir / "serverinfo.pem"
        path.write_bytes(ct.serverinfo_pem(ct.tls_scts(leaf, specs)))
    else:
        option, path = "-status_file", w.dir / "staple.der"
        path.write_bytes(ct.ocsp_staple(leaf, w.inter, specs))
    server = SServer(w, "beside.test", option, str(path), version)
    try:
        p = make_proxy(proxy={"allow_ports": [server.port], "ct_log_list": str(w.dir / "ct-log-list.json")},
                       resolve={"beside.test": "127.0.0.1"}, default={"trust": "system", "ct": "enforce"})
        for again in (False, True):
            if again:
                p.reload()
            with Tunnel(p, "beside.test", server.port) as t:
                line = p.connection_log(t.client_port)
            assert line["ct"] == "compliant", line
            assert line["scts"].count(f"source={delivery} counted") == 2, line
    finally:
        server.close()


def test_diagnose_prints_each_sct_and_the_ct_check(pinproxy, world):
    w = world
    good = originlib.TLSOrigin(w.leaf("diag.test", ct.SCTSpec(w.a1), ct.SCTSpec(w.b1, corrupt=True), ct.SCTSpec(w.c1)),
                               w.dir / "diag.test.key", name="ct-diag")
    try:
        cfg = w.config(proxy=f'ct_log_list = "{w.dir / "ct-log-list.json"}"\nallow_ports = [{good.port}]')
        res = run(pinproxy, w, "diagnose", f"diag.test:{good.port}", "--connect-to", "127.0.0.1", "--config", cfg)
    finally:
        good.close()
    assert res.code == 0, res
    assert re.search(r"^  ct\s+pass\s+compliant: 2 embedded SCTs from 2 operators", res.out, re.M), res
    assert re.search(r'^    sct: log="B one" .* source=embedded not counted: bad signature$', res.out, re.M), res
    assert 'ct = "enforce"' in res.out[res.out.index('[hosts."diag.test"]'):], res


def test_transparent_listener_enforces_ct(capture, daemon_world):
    """A local user's connection that the egress lock sends to pinproxy (no proxy variable, SNI
    ct.test, any address): a server without SCTs is refused inside TLS with ct-missing, one with
    two embedded SCTs of two operators is served."""
    w = daemon_world
    good = capture.ns.call(originlib.TLSOrigin, w.leaf("ct.test", ct.SCTSpec(w.a1), ct.SCTSpec(w.b1)), w.dir / "ct.test.key",
                           name="ct-good", address="127.0.0.1", port=443)
    # The same name, a certificate of the same CA without any SCT, at another address.
    bare = ct.issue_leaf(w.inter, "ct.test")
    ct.write_pem(w.dir / "ct-bare.pem", bare, w.inter)
    (w.dir / "ct-bare.key").write_bytes(pkilib.key_pem(bare.key))
    none = capture.ns.call(originlib.TLSOrigin, w.dir / "ct-bare.pem", w.dir / "ct-bare.key", name="ct-none", address="127.0.0.2", port=443)
    try:
        proxy = capture.proxy(proxy={"ct_log_list": str(w.dir / "ct-log-list.json")},
                              hosts={"ct.test": {"trust": "system", "ct": "enforce"}})
        proxy.lock()
        ca = capture.ca(proxy)

        fetched = capture.curl("https://ct.test/small", ca, "ct.test:443:127.0.0.2")
        assert fetched.status == 403 and "pinproxy refused ct.test:443: ct-missing" in fetched.body, f"{fetched}"
        line = proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("outcome") == "refused")
        assert (line.get("reason"), line.get("listener"), line.get("ct"), line.get("scts")) == \
            ("ct-missing", "transparent", "ct-missing", "none"), line.raw
        assert none.paths == [], f"a refused request reached the origin: {none.paths}"

        fetched = capture.curl("https://ct.test/small", ca, "ct.test:443:127.0.0.1")
        assert fetched.exit == 0 and fetched.status == 200 and fetched.body == originlib.SMALL_BODY.decode(), f"{fetched}"
        line = proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("outcome") == "allowed")
        assert (line.get("listener"), line.get("ct")) == ("transparent", "compliant"), line.raw
        assert line.get("scts").count("source=embedded counted") == 2, line.raw
    finally:
        good.close()
        none.close()
