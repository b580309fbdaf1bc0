"""Minting is counted: `pinproxy_minted_leaves_total` reads 0 from the first scrape and counts
every leaf the local CA mints, once per host while its leaf is cached. Any local client can
make pinproxy mint for any name it sends (here: names refused host-denied under
`refusal = "in-tls"`, whose page is served behind a minted leaf); the cache that keeps them is
bounded in count and bytes (unit tests: MintedLeafCacheTests).
"""

from __future__ import annotations

from proxy_harness import connect, free_port, make_proxy, poll, port_accepts  # noqa: F401 (fixture)
from service_support import scrape


def test_minted_leaves_are_counted_once_per_cached_host(make_proxy):
    mport = free_port()
    p = make_proxy(proxy={"allow_ports": [443], "refusal": "in-tls", "metrics_listen": f"127.0.0.1:{mport}"})
    poll(lambda: port_accepts(mport), what="the metrics listener")
    assert scrape(mport).value("pinproxy_minted_leaves_total") == 0

    def refuse_in_tls(host: str):
        c = connect(p.port, host, 443)
        assert c.answer.status == 200, c.answer  # the refusal follows inside TLS, behind a minted leaf
        c.close()
        p.connection_log(c.client_port)

    for host in ("a.test", "b.test", "c.test"):
        refuse_in_tls(host)
    poll(lambda: scrape(mport).value("pinproxy_minted_leaves_total") == 3, what="three minted leaves")
    for host in ("a.test", "b.test", "c.test", "A.test."):
        refuse_in_tls(host)
    refuse_in_tls("d.test")
    poll(lambda: scrape(mport).value("pinproxy_minted_leaves_total") == 4, what="one more minted leaf, for d.test only")
