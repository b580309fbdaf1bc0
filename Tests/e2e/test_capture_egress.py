"""`pinproxy egress print|apply|remove|status`: the nftables egress lock, in a fresh network
namespace each (capture_harness.py), never the host's ruleset."""

from __future__ import annotations

import json

from capture_harness import TRANSPARENT_PORT, capture, public_dir  # noqa: F401 (fixtures)
from conftest import diagnostics
from proxy_harness import pinned_entry

ORIGIN_BODY = "hello from the pinproxy test origin\n"

#: Sends one UDP datagram to each of (address, port) and prints what sendto said, as JSON.
UDP_PROBE = """
import errno, json, socket, sys
out = {}
for address, port in json.loads(sys.argv[1]):
    s = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b"quic initial?", (address, port))
        out[f"{address} {port}"] = "sent"
    except OSError as e:
        out[f"{address} {port}"] = errno.errorcode.get(e.errno, str(e.errno))
    finally:
        s.close()
print(json.dumps(out))
"""

#: A table of someone else's, which pinproxy must never touch.
OTHER_TABLE = """table inet someone_else {
    chain output {
        type filter hook output priority 10; policy accept;
        tcp dport 9 counter
    }
}
"""


def test_print_passes_nft_check_and_names_what_it_captures(capture, pki):
    proxy = capture.proxy(start=False)
    p = proxy.egress("print")
    assert p.returncode == 0, p.stderr
    assert "table inet pinproxy {" in p.stdout and f"redirect to :{TRANSPARENT_PORT}" in p.stdout, p.stdout
    checked = capture.ns.run("nft", "-c", "-f", "-", input=p.stdout)
    assert checked.returncode == 0, f"nft -c -f rejects the printed ruleset:\n{checked.stderr}\n{p.stdout}"
    assert capture.ns.ruleset() == "", "nft -c changed the ruleset"


def test_apply_twice_then_remove_leaves_the_ruleset_as_before(capture, pki):
    capture.ns.nft(OTHER_TABLE)
    before = capture.ns.ruleset()
    proxy = capture.proxy(start=False)
    status = proxy.egress("status")
    assert status.returncode == 3 and status.stdout.startswith("egress lock: off"), f"{status.stdout}{status.stderr}"

    for _ in range(2):
        p = proxy.egress("apply")
        assert p.returncode == 0, p.stderr
        assert p.stdout.startswith("egress lock: on: tcp 443 to 127.0.0.1:8 and [::1]:8; udp 443 rejected"), p.stdout
    listing = capture.ns.ruleset()
    assert listing.count("table inet pinproxy") == 1, listing
    assert "table inet someone_else" in listing, listing
    summary = "egress lock: on: tcp 443 to 127.0.0.1:8 and [::1]:8; udp 443 rejected; this host's own addresses captured too; exempt: root (uid 0)\n"
    # On, but nothing listens: broken (exit 4), and it says what that means.
    status = proxy.egress("status")
    assert status.returncode == 4, f"{status.stdout}{status.stderr}"
    assert status.stdout == summary + "".join(
        f"listener {a}: nothing listens: lock on, daemon down: HTTPS from this host fails\n" for a in ("127.0.0.1:8", "[::1]:8")), status.stdout
    proxy.start()
    status = proxy.egress("status")
    assert status.returncode == 0, f"{status.stdout}{status.stderr}"
    assert status.stdout == summary + "".join(f"listener {a}: pinproxy (pid {proxy.pid})\n" for a in ("127.0.0.1:8", "[::1]:8")), status.stdout

    # The live table is not what another config says: status shows it and says so (exit 4).
    proxy.capture["local"] = False
    proxy.write_config()
    status = proxy.egress("status")
    assert status.returncode == 4 and "its rules are not what" in status.stdout and "meta skuid 0 return" in status.stdout, status.stdout
    proxy.stop()

    for _ in range(2):
        p = proxy.egress("remove")
        assert p.returncode == 0 and p.stdout == "egress lock: off\n", f"{p.stdout}{p.stderr}"
    assert capture.ns.ruleset() == before
    assert proxy.egress("status").returncode == 3


def test_apply_refuses_a_family_without_a_listener(capture, pki):
    proxy = capture.proxy(start=False, proxy={"transparent_listen": [f"127.0.0.1:{TRANSPARENT_PORT}"]})
    p = proxy.egress("apply")
    assert p.returncode == 1, p.stdout
    assert 'proxy.transparent_listen has no "[::1]:PORT" (IPv6)' in p.stderr, p.stderr
    assert capture.ns.ruleset() == "", "a refused apply changed the ruleset"


def test_check_reads_capture_with_file_line_and_warns_on_a_lone_listener(ws):
    cfg = ws.config("""
        [proxy]
        transparent_listen = ["127.0.0.1:3129"]

        [capture]
        ports = [443]
        block_qiuc = true
        """)
    r = ws.check(cfg)
    assert r.code == 1, r
    assert [(d.line, d.message) for d in diagnostics(r.err, str(cfg))] == [(7, 'unknown key capture.block_qiuc (did you mean "block_quic"?)')], r
    cfg = ws.config("""
        [proxy]
        transparent_listen = ["127.0.0.1:3129", "[::1]:3129"]

        [capture]
        ports = []
        exempt_users = ["root"]
        """)
    r = ws.check(cfg)
    assert r.code == 0, r
    assert [(d.line, d.message) for d in diagnostics(r.out, str(cfg))] == [
        (6, "warning: proxy.transparent_listen is set, but capture.ports is empty: `pinproxy egress` redirects nothing to it")], r


def test_udp_to_the_capture_ports_is_rejected_on_ipv4_and_ipv6(capture, pki):
    proxy = capture.proxy(start=False)
    targets = [["127.0.0.1", 443], ["::1", 443], ["127.0.0.1", 444], ["::1", 444]]

    def probe(as_root: bool = False) -> dict:
        argv = ["/usr/bin/python3", "-c", UDP_PROBE, json.dumps(targets)]
        p = capture.ns.run(*argv) if as_root else capture.client(argv)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    assert set(probe().values()) == {"sent"}, "without the lock every datagram goes out"
    proxy.lock()
    # Locally generated packets that `reject` drops fail at sendto with EPERM.
    assert probe() == {"127.0.0.1 443": "EPERM", "::1 443": "EPERM", "127.0.0.1 444": "sent", "::1 444": "sent"}
    assert set(probe(as_root=True).values()) == {"sent"}, "an exempt user's datagrams must go out"


def test_with_the_daemon_stopped_https_fails_until_the_lock_is_lifted(capture, pki):
    origin = capture.origin("api")
    proxy = capture.proxy(hosts={"api.test": pinned_entry(pki, "api", "api-newkey")})
    proxy.lock()
    ca = capture.ca(proxy)
    root = capture.public / "root-a.pem"
    root.write_bytes(pki.path("root-a.pem").read_bytes())
    root.chmod(0o644)
    assert capture.curl("https://api.test/small", ca, "api.test:443:127.0.0.1").status == 200
    served = len(origin.paths)

    proxy.stop()
    # Fail closed: nothing listens where the lock sends the connection.
    fetched = capture.curl("https://api.test/small", root, "api.test:443:127.0.0.1")
    assert fetched.exit != 0 and fetched.status == 0, f"{fetched}"
    assert len(origin.paths) == served, "a request went out unpinned while the daemon was down"

    p = proxy.egress("remove")
    assert p.returncode == 0, p.stderr
    # Lifted: the client reaches the origin directly (and trusts its real root).
    fetched = capture.curl("https://api.test/small", root, "api.test:443:127.0.0.1")
    assert fetched.status == 200 and fetched.body == ORIGIN_BODY, f"{fetched}"
