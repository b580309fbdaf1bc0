"""Names that prove nothing are bound to their addresses, and every decision and tunnel line
names the upstream it connected to (`upstream`).

On the transparent listener the client chooses the address (its original destination) as well
as the name (its SNI). Where the entry's admission proves nothing about the name
(`action = "allow-insecure"`, like `mode = "tunnel"`; the table is in
docs/trust-decisions.md), the original destination must be one of the addresses the name
resolves to for pinproxy (`[resolve]`, or its DNS resolver: here the daemon's own /etc/hosts),
else `destination-mismatch` before any connect. Here a client (user nobody) whose `[clients]`
section allows only insecure.test sends SNI insecure.test to the address of secret.test, a
denied host: refused, and secret.test's origin sees no connection.

Each test runs in a fresh network namespace (capture_harness.py), clients as user nobody.
"""

from __future__ import annotations

import json

from capture_harness import capture, public_dir  # noqa: F401 (fixtures)
from proxy_harness import PIN_X, PIN_Y, pinned_entry
from test_capture_transparent import ORIGIN_BODY, refused_in_tls, served
from test_capture_tunnel_h2 import HostsCaptureProxy

NOBODY_ONLY_INSECURE = '[clients."uid:65534"]\nallow = ["insecure.test"]\n'
HOSTS = {"insecure.test": {"action": "allow-insecure"}, "secret.test": {"action": "deny"}}


def start(proxy, clients: str = NOBODY_ONLY_INSECURE):
    proxy.write_config(proxy.render() + "\n" + clients)
    proxy.start()
    proxy.lock()
    return proxy


def test_allow_insecure_sni_to_a_denied_hosts_address_is_refused(capture, pki, tmp_path):
    insecure = capture.origin("api", address="127.0.0.1")
    secret = capture.origin("api", address="127.0.0.2")
    hosts_file = capture.public / "daemon-hosts"
    hosts_file.write_text("127.0.0.1 insecure.test\n127.0.0.2 secret.test\n")
    proxy = HostsCaptureProxy(capture.bin, tmp_path / "proxy", pki, ns=capture.ns, hosts_file=hosts_file, hosts=HOSTS)
    capture._proxies.append(proxy)
    start(proxy)
    ca = capture.ca(proxy)

    # The attack: SNI insecure.test sent to the denied host's address.
    fetched = capture.curl("https://insecure.test/small", ca, "insecure.test:443:127.0.0.2", "-v")
    refused_in_tls(fetched, "destination-mismatch", "insecure.test")
    line = proxy.wait_for_log(lambda l: l.get("event") == "connection")
    assert (line.get("outcome"), line.get("reason"), line.get("listener")) == ("refused", "destination-mismatch", "transparent"), line.raw
    detail = line.get("detail", "")
    assert "127.0.0.2" in detail and "127.0.0.1" in detail and 'action = "allow-insecure"' in detail, line.raw
    assert "upstream" not in line, f"nothing was connected, yet the line names an upstream: {line.raw}"
    assert secret.connections == 0, "the allow-insecure name reached the denied host's address"

    # The control: insecure.test at its own address is relayed, and both lines name the upstream.
    mark = proxy.mark()
    served(capture.curl("https://insecure.test/small", ca, "insecure.test:443:127.0.0.1"), insecure)
    allowed = proxy.wait_for_log(lambda l: l.get("event") == "connection", since=mark)
    assert (allowed.get("outcome"), allowed.get("listener"), allowed.get("client_uid")) == ("allowed", "transparent", "65534"), allowed.raw
    assert allowed.get("upstream") == "127.0.0.1:443", allowed.raw
    closed = proxy.wait_for_log(lambda l: l.get("event") == "tunnel-closed", since=mark)
    assert closed.get("upstream") == "127.0.0.1:443", closed.raw
    assert insecure.paths == ["/small"] and secret.connections == 0, (insecure.paths, secret.connections)


def test_resolve_binds_an_allow_insecure_name_too(capture, pki):
    insecure = capture.origin("api", address="127.0.0.1")
    secret = capture.origin("api", address="127.0.0.2")
    proxy = start(capture.proxy(start=False, hosts=HOSTS, resolve={"insecure.test": "127.0.0.1"}))
    ca = capture.ca(proxy)
    served(capture.curl("https://insecure.test/small", ca, "insecure.test:443:127.0.0.1"), insecure)
    fetched = capture.curl("https://insecure.test/small", ca, "insecure.test:443:127.0.0.2", "-v")
    refused_in_tls(fetched, "destination-mismatch", "insecure.test")
    reasons = [(l.get("outcome"), l.get("reason"), l.get("upstream")) for l in proxy.decisions(listener="transparent")]
    assert reasons == [("allowed", None, "127.0.0.1:443"), ("refused", "destination-mismatch", None)], reasons
    assert secret.connections == 0 and insecure.paths == ["/small"], (secret.connections, insecure.paths)


def test_a_verified_name_is_not_bound(capture, pki):
    """An entry whose chain and name are verified is relayed to the client's own address, even
    one its name does not resolve to (no [resolve], no DNS answer): the server proves the name."""
    origin = capture.origin("api", address="127.0.0.3")
    proxy = start(capture.proxy(start=False, hosts={"api.test": pinned_entry(pki, "api", "api-newkey")}),
                  clients='[clients."uid:65534"]\nallow = ["api.test"]\n')
    served(capture.curl("https://api.test/small", capture.ca(proxy), "api.test:443:127.0.0.3"), origin)
    [line] = proxy.decisions(listener="transparent")
    assert (line.get("outcome"), line.get("upstream")) == ("allowed", "127.0.0.3:443"), line.raw


def test_upstream_on_both_listeners_in_json_with_ipv6(capture, pki):
    """`upstream` is `[ADDR]:PORT` for IPv6, on the decision and tunnel-closed lines of both
    listeners, and a refusal after the connect names it too."""
    origin = capture.origin("api", address="::1")
    hosts = {"api.test": pinned_entry(pki, "api", "api-newkey"),
             "www.api.test": {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X, PIN_Y]}}
    proxy = capture.proxy(hosts=hosts, resolve={"api.test": "::1", "www.api.test": "::1"}, proxy={"log_format": "json"})
    proxy.lock()
    ca = capture.ca(proxy)
    served(capture.curl("https://api.test/small", ca, "api.test:443:[::1]"), origin)
    proxy.wait_for_log(lambda l: l.get("event") == "tunnel-closed")
    fetched = capture.curl("https://api.test/small", ca, None, "--proxy", f"http://127.0.0.1:{proxy.port}")
    assert fetched.exit == 0 and fetched.body == ORIGIN_BODY, f"{fetched}"
    refused = capture.curl("https://www.api.test/small", ca, "www.api.test:443:[::1]")
    assert refused.status == 403, f"{refused}"
    proxy.wait_for_log(lambda l: l.get("event") == "connection" and l.get("host") == "www.api.test")
    proxy.wait_for_log(lambda l: l.get("event") == "tunnel-closed" and l.get("listener") == "connect")
    lines = [l for l in proxy.logs() if l.get("event") in ("connection", "tunnel-closed")]
    seen = sorted((l["event"], l.get("listener"), l.get("outcome", "-"), l.get("upstream")) for l in lines)
    assert seen == [("connection", "connect", "allowed", "[::1]:443"), ("connection", "transparent", "allowed", "[::1]:443"),
                    ("connection", "transparent", "refused", "[::1]:443"),
                    ("tunnel-closed", "connect", "-", "[::1]:443"), ("tunnel-closed", "transparent", "-", "[::1]:443")], seen
    assert all(l.is_json and isinstance(json.loads(l.raw)["upstream"], str) for l in lines), [l.raw for l in lines]
