"""`pinproxy run`: connect_timeout bounds connecting to all of a name's addresses together.

A name whose many addresses never answer the connect (loopback listeners with a full accept
queue, so every SYN is dropped and nothing leaves loopback) is refused `upstream-timeout`
once connect_timeout is over, not after connect_timeout for each address in turn. An address
that is not the last gets at most half of the time left, so an answering address after a
dead one is still reached.
"""

from __future__ import annotations

import time

from proxy_harness import (
    API,
    Blackhole,
    connect,
    expect_refusal,
    make_proxy,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    pinned_entry,
)

ADDRESSES = [f"127.0.0.{i}" for i in range(2, 14)]  # 12 addresses
CONNECT_TIMEOUT = 2


def test_one_deadline_for_all_addresses(make_proxy, pki):
    holes = Blackhole.many(ADDRESSES)
    try:
        port = holes[0].port
        p = make_proxy(proxy={"allow_ports": [port], "connect_timeout": CONNECT_TIMEOUT, "handshake_timeout": 60},
                       resolve={API: ADDRESSES}, hosts={API: pinned_entry(pki, "api", "int-a")})
        started = time.monotonic()
        answer, line = expect_refusal(p, API, port, "upstream-timeout")
        elapsed = time.monotonic() - started
        # One address after another, each with connect_timeout, would take 12 x 2 s. The
        # deadline is a contract, not a performance figure: this bound only separates the two.
        assert elapsed < len(ADDRESSES) * CONNECT_TIMEOUT / 2, f"refused after {elapsed:.1f}s\n{p.describe()}"
        assert f"timed out after {CONNECT_TIMEOUT}s" in line["detail"], line.raw
        assert "127.0.0.2:" in line["detail"], line.raw
    finally:
        for h in holes:
            h.close()


def test_an_answering_address_after_a_dead_one_is_reached(make_proxy, origins, pki):
    # A dead listener on the origin's port, on another loopback address (the origin listens
    # on 127.0.0.1 only), tried first.
    port = origins.api.port
    hole = None
    for address in ("127.0.0.21", "127.0.0.22", "127.0.0.23"):
        try:
            hole = Blackhole(address, port)
            break
        except OSError:
            continue
    assert hole is not None, "no loopback address free for the dead listener"
    try:
        p = make_proxy(proxy={"allow_ports": [port], "connect_timeout": CONNECT_TIMEOUT},
                       resolve={API: [hole.address, "127.0.0.1"]}, hosts={API: pinned_entry(pki, "api", "int-a")})
        c = connect(p.port, API, port)
        assert c.answer.status == 200, f"{c.answer}\n{p.describe()}"
        c.close()
    finally:
        hole.close()
