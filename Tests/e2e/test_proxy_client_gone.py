"""`pinproxy run`: a client that leaves before its tunnel opens frees its slot at once.

A flood of clients that send CONNECT and close at once, against an upstream that never
finishes (an origin that accepts TCP and never speaks, or an address that never answers the
connect), must not hold descriptors or connection slots until handshake_timeout or
connect_timeout: the daemon watches the client in every phase, abandons the upstream work
when it leaves, and logs that once (`event=connection outcome=client-gone`), never an
`upstream-timeout` refusal nobody reads (and counts it, `outcome="client-gone"` in
`pinproxy_connections_total`). A good client is served throughout, and the
descriptor count returns to its idle value.
"""

from __future__ import annotations

import socket

import pytest

from proxy_harness import (
    API,
    Blackhole,
    TIMEOUT,
    dns_isolation,
    free_port,
    https_get,
    make_proxy,  # noqa: F401 (fixture)
    open_descriptors,
    origins,  # noqa: F401 (fixture)
    pinned_entry,
    poll,
)
from service_support import scrape

FLOOD = 150
WAVE = 25
#: Far beyond the test's waits: without the fix, every departed client's slot stays taken.
UPSTREAM_TIMEOUT = 120
GOOD_HOST = "good.test"


def connect_and_close(proxy_port: int, host: str, port: int) -> int:
    """Sends CONNECT, closes at once; returns the client port (the log's client field)."""
    s = socket.create_connection(("127.0.0.1", proxy_port), timeout=TIMEOUT)
    try:
        s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        return s.getsockname()[1]
    finally:
        s.close()


@pytest.fixture(params=["resolving", "connecting", "upstream-handshake"])
def stuck(request, origins, tmp_path):
    """(host, port, daemon keywords) of an upstream where a connection gets stuck in that phase."""
    if request.param == "upstream-handshake":
        yield API, origins.silent.port, {}
    elif request.param == "connecting":
        hole = Blackhole("127.0.0.1")
        yield API, hole.port, {}
        hole.close()
    else:
        # A DNS server on loopback that never answers; the daemon asks it, and only it.
        if dns_isolation() is not None:
            pytest.skip(f"the daemon cannot be given its own resolv.conf: {dns_isolation()}")
        silent_dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        silent_dns.bind(("127.0.0.1", 0))
        resolv_conf = tmp_path / "resolv.conf"
        resolv_conf.write_text(f"nameserver 127.0.0.1:{silent_dns.getsockname()[1]}\noptions timeout:{UPSTREAM_TIMEOUT} attempts:1\n")
        yield "unresolved.test", origins.silent.port, {"resolv_conf": resolv_conf}
        silent_dns.close()


def test_departed_clients_free_their_slots_at_once(make_proxy, origins, pki, stuck):
    host, port, extra = stuck
    good_port = origins.api.port
    mport = free_port()
    p = make_proxy(
        proxy={"allow_ports": [port, good_port], "max_connections": FLOOD // 3, "dns_timeout": UPSTREAM_TIMEOUT,
               "handshake_timeout": UPSTREAM_TIMEOUT, "connect_timeout": UPSTREAM_TIMEOUT,
               "metrics_listen": f"127.0.0.1:{mport}"},
        resolve={API: "127.0.0.1", GOOD_HOST: "127.0.0.1"},
        hosts={host: pinned_entry(pki, "api", "int-a"), GOOD_HOST: {"action": "allow-insecure"}},
        **extra,
    )
    status, body, _, _ = https_get(p, GOOD_HOST, good_port, "/small")
    assert status == 200 and body
    p.wait_for_log(lambda l: l.get("event") == "tunnel-closed")
    idle = open_descriptors(p.pid)

    # The flood, in waves that together hold three times the connection limit: each wave
    # needs the slots the earlier ones took.
    clients: list[int] = []

    def decisions(ports):
        wanted = {str(c) for c in ports}
        lines = [l for l in p.logs() if l.get("event") == "connection" and l.get("client", "").rsplit(":", 1)[-1] in wanted]
        return lines if len(lines) >= len(wanted) else None

    for _ in range(FLOOD // WAVE):
        wave = [connect_and_close(p.port, host, port) for _ in range(WAVE)]
        clients += wave
        poll(lambda: decisions(wave), what=f"a decision line for each client of the wave\n{p.describe()}")

    # Each departed client is logged once, as such; nothing waits for the upstream timeout.
    lines = decisions(clients)
    per_client: dict[str, list] = {}
    for l in lines:
        per_client.setdefault(l["client"], []).append(l)
    assert len(per_client) == FLOOD
    for client, found in per_client.items():
        assert [l["outcome"] for l in found] == ["client-gone"], (client, [l.raw for l in found])
        assert "status" not in found[0] and "reason" not in found[0], found[0].raw
    assert not [l for l in p.logs() if l.get("reason") == "upstream-timeout"]
    metrics = scrape(mport)
    assert metrics.value("pinproxy_connections_total", outcome="client-gone", reason="none") == FLOOD, metrics
    assert metrics.value("pinproxy_connections_total", outcome="allowed", reason="none") == 1, metrics

    # The descriptors come back (both sides of every departed connection), and a good client
    # is served: the flood held no slot longer than its client stayed.
    poll(lambda: open_descriptors(p.pid) <= idle,
         what=f"pinproxy's descriptors to return to {idle} (now {open_descriptors(p.pid)})")
    status, body, _, _ = https_get(p, GOOD_HOST, good_port, "/small")
    assert status == 200 and body
    assert not [l for l in p.logs() if l.get("event") == "connection-limit" and "client" in l]
