"""`pinproxy run`: SIGHUP re-reads the config.

- A valid new config applies to new connections at once (synchronised on the
  `event=reload outcome=ok` line).
- An invalid one is logged (`event=reload outcome=failed error="FILE:LINE: …"`) and the
  old policy keeps serving — including the parts the broken file would have changed.
- Open tunnels are never cut by a reload, even one that now denies their host.
Each test has its own daemon (they rewrite its config).
"""

from __future__ import annotations

import os
import re
import signal

import pytest

import origin as originlib
from proxy_harness import (
    API,
    PIN_X,
    PIN_Y,
    Tunnel,
    expect_refusal,
    make_proxy,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    pinned_entry,
    poll,
    render_config,
    rss_kib,
)


def start(make_proxy, origins, pki, **hosts):
    return make_proxy(
        proxy={"allow_ports": [origins.api.port]},
        resolve={API: "127.0.0.1", "www.api.test": "127.0.0.1"},
        hosts=hosts,
    )


def assert_allowed(proxy, origins, host=API):
    with Tunnel(proxy, host, origins.api.port) as t:
        assert t.get("/small") == (200, originlib.SMALL_BODY)
        cport = t.client_port
    line = proxy.connection_log(cport)
    assert line.get("outcome") == "allowed", line.raw
    return line


def test_reload_new_pin(make_proxy, origins, pki):
    p = start(make_proxy, origins, pki,
              **{API: {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X, PIN_Y]}})
    expect_refusal(p, API, origins.api.port, "pin-mismatch")

    p.hosts[API]["pins"] = [pki.spki("api"), pki.spki("int-a")]
    p.write_config()
    line = p.reload()
    assert line.get("outcome") == "ok", line.raw
    assert_allowed(p, origins)


def insert_into_entry(text: str, pattern: str, new_lines: list[str]) -> tuple[str, int]:
    """TEXT with NEW_LINES right after the [hosts."PATTERN"] header; the 1-based number of the last one."""
    lines = text.splitlines()
    i = lines.index(f'[hosts."{pattern}"]')
    lines[i + 1:i + 1] = new_lines
    return "\n".join(lines) + "\n", i + 1 + len(new_lines)


@pytest.mark.parametrize("broken", [
    pytest.param('min_tls = "1.1"', id="bad-value"),
    pytest.param('revocation = "sometimes"', id="bad-enum"),
    pytest.param('validate_host = "yes"', id="bad-type"),
    pytest.param('action = "deny', id="toml-syntax"),
])
def test_reload_broken_config_keeps_old_policy(make_proxy, origins, pki, broken):
    p = start(make_proxy, origins, pki,
              **{API: pinned_entry(pki, "api", "int-a"),
                 "www.api.test": {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X, PIN_Y]}})
    assert_allowed(p, origins)

    # The broken file would deny api.test and pin www.api.test right, were it applied.
    changed = {API: {**p.hosts[API], "action": "deny"},
               "www.api.test": pinned_entry(pki, "api", "int-a")}
    text, bad_line = insert_into_entry(render_config(p.proxy_keys, p.resolve, p.default, changed), API, [broken])
    p.write_config(text)
    line = p.reload()
    assert line.get("outcome") == "failed", line.raw
    error = line.get("error", "")
    locations = [(m.group(1), int(m.group(2))) for m in re.finditer(r"(\S*?pinproxy\.toml):(\d+):", error)]
    assert locations, f"no FILE:LINE in the reload error: {line.raw}"
    assert (str(p.config_path), bad_line) in locations, (
        f"expected {p.config_path}:{bad_line}: in {line.raw}\n--- config:\n{text}")

    # The old policy is still the one enforced, both ways, and the proxy still serves.
    assert_allowed(p, origins)
    expect_refusal(p, "www.api.test", origins.api.port, "pin-mismatch")

    # A fixed file then applies.
    p.hosts[API]["action"] = "deny"
    p.write_config()
    line = p.reload()
    assert line.get("outcome") == "ok", line.raw
    expect_refusal(p, API, origins.api.port, "host-denied")


def test_open_tunnel_survives_reload(make_proxy, origins, pki):
    p = start(make_proxy, origins, pki, **{API: pinned_entry(pki, "api", "int-a")})
    with Tunnel(p, API, origins.api.port) as t:
        assert t.get("/small") == (200, originlib.SMALL_BODY)

        p.hosts[API] = {"action": "deny"}
        p.write_config()
        assert p.reload().get("outcome") == "ok"
        expect_refusal(p, API, origins.api.port, "host-denied")  # new connections: new policy

        n = 1 << 20
        assert t.get(f"/bytes/{n}") == (200, originlib.big_body()[:n])  # the open tunnel: untouched
        assert t.get("/small") == (200, originlib.SMALL_BODY)
        cport = t.client_port
    closed = p.wait_for_log(lambda l: l.get("event") == "tunnel-closed" and l.get("client") == f"127.0.0.1:{cport}",
                            what="the surviving tunnel's tunnel-closed line")
    assert int(closed["bytes_down"]) >= n, closed.raw


def test_repeated_reloads(make_proxy, origins, pki):
    p = start(make_proxy, origins, pki, **{API: pinned_entry(pki, "api", "int-a")})
    assert_allowed(p, origins)  # (a SIGHUP right at readiness is test_sighup_as_soon_as_ready's business)
    for _ in range(5):
        assert p.reload().get("outcome") == "ok"
    assert len([l for l in p.logs() if l.get("event") == "reload"]) == 5
    assert_allowed(p, origins)


@pytest.mark.skipif(os.environ.get("PINPROXY_SANITIZER") in ("address", "thread"),
                    reason="under a sanitizer, RSS holds its quarantine and shadow memory, not pinproxy's")
def test_reloads_free_the_parsed_config(make_proxy, origins, pki):
    """TOMLKit never frees a document it parsed, which is several times the size of the file;
    pinproxy frees it after every load. Reloading a 1,000-entry config (about 160 KB) grows the
    daemon by far less than that each time. (TOMLKit also leaks each value it hands out, a few
    bytes per key: that part remains.)"""
    hosts = {f"h{i}.example.test": {"pin": "public-key", "pins": [PIN_X, PIN_Y]} for i in range(1000)}
    p = start(make_proxy, origins, pki, **hosts)
    size_kib = len(p.config_text) // 1024
    for _ in range(5):  # the allocator settles
        assert p.reload().get("outcome") == "ok"
    before = rss_kib(p.pid)
    reloads = 20
    for _ in range(reloads):
        assert p.reload().get("outcome") == "ok"
    # Each document is freed on another thread just after its load: wait for the last ones.
    bound = reloads * size_kib * 3
    poll(lambda: rss_kib(p.pid) - before < bound, timeout=10,
         what=f"the daemon to have grown by less than {bound} KiB over {reloads} reloads of a {size_kib} KiB config")


def test_sighup_as_soon_as_ready(make_proxy, origins, pki):
    """Ready means the listen port accepts (the contract): a SIGHUP from that moment on must
    reload, never kill the daemon with the default action.  Repeated, as it is a race."""
    for i in range(5):
        p = make_proxy(name=f"early{i}", proxy={"allow_ports": [origins.api.port]},
                       hosts={API: pinned_entry(pki, "api", "int-a")})
        p.send_signal(signal.SIGHUP)
        line = p.wait_for_log(lambda l: l.get("event") == "reload", timeout=5,
                              what="an event=reload line after a SIGHUP sent right at readiness")
        assert line.get("outcome") == "ok", line.raw
        p.assert_alive("after a SIGHUP sent right at readiness")
        p.stop()


DEEP = {
    # The two shapes: one table header of 100,000 parts, one dotted key of 80,000.
    "header": lambda: "[" + ".".join(["a"] * 100_000) + "]\n",
    "dotted-key": lambda: ".".join(["a"] * 80_000) + " = 1\n",
}


@pytest.mark.parametrize("shape", sorted(DEEP))
def test_reload_with_a_deeply_nested_config_keeps_the_daemon_and_its_policy(make_proxy, origins, pki, shape):
    """toml++ recurses as deep as a config nests: such a file killed the daemon on SIGHUP. It is
    now refused before parsing, with its line, and the old policy keeps serving."""
    p = start(make_proxy, origins, pki, **{API: pinned_entry(pki, "api", "int-a")})
    assert_allowed(p, origins)
    good = p.config_text
    p.write_config(good + DEEP[shape]())
    line = p.reload()
    assert line.get("outcome") == "failed", line.raw
    bad_line = len(good.splitlines()) + 1
    assert f"{p.config_path}:{bad_line}: " in line.get("error", "") and "deeper than 16 levels" in line.get("error", ""), line.raw
    p.assert_alive("after reloading a deeply nested config")
    assert_allowed(p, origins)
