"""Upstream TLS session resumption (docs/how-it-works.md): resumption saves a handshake,
never a check.

The daemon caches an upstream session only after its connection passed the verdict, keyed by
the entry's policy fingerprint, host and port. These tests watch it from the origin's side
(Python's ssl reports `session_reused` for every handshake it serves; `openssl s_server -www`
prints "Reused" or "New" in its page) and from the daemon's log ("upstream TLS session
resumed" in the connection line's detail):

- the verdict runs on a resumed connection: a CRL published after the session was cached
  (the entry's policy unchanged, so its sessions are kept) revokes the leaf, and the resumed
  connection is refused, after which the session is dropped;
- a session made for host A under a lax policy is never offered for host B under a strict
  one, though both resolve to the same address and port (and the origin would resume it);
- a reload drops the sessions of the entries it changed, and keeps the others (a failed
  reload keeps them all);
- `ocsp-staple` entries are never resumed (a resumed handshake carries no staple);
- connections made at the same time all resume: each resumes from its own copy of the cached
  session, which OpenSSL marks "not resumable" once a new ticket arrives for it.
Each test has its own origin (so its handshake record is its own) and daemon.
"""

from __future__ import annotations

import datetime as dt
import shutil
from concurrent.futures import ThreadPoolExecutor
import socket
import ssl
import subprocess

import pytest

import origin as originlib
import pki as pkilib
from proxy_harness import (
    API,
    PIN_X,
    TIMEOUT,
    Tunnel,
    expect_refusal,
    free_port,
    make_proxy,  # noqa: F401 (fixture)
    pinned_entry,
    poll,
    port_accepts,
)

WWW = "www.api.test"  # also named by the api certificate, and resolved to the same address
RESUMED = "upstream TLS session resumed"


@pytest.fixture
def api_origin(pki):
    """A fresh api.test / www.api.test origin: its own session ticket keys and handshake record."""
    o = originlib.TLSOrigin(pki.path("api-chain.pem"), pki.path("api.key"), name="resumption")
    yield o
    o.close()


def start(make_proxy, port: int, hosts: dict):
    return make_proxy(proxy={"allow_ports": [port]}, resolve={API: "127.0.0.1", WWW: "127.0.0.1"}, hosts=hosts)


def fetch(proxy, origin, host: str) -> tuple[bool, bool]:
    """GET /small through the proxy: (the origin resumed the session, the daemon says so)."""
    before = len(origin.resumed)
    with Tunnel(proxy, host, origin.port) as t:
        assert t.get("/small") == (200, originlib.SMALL_BODY)
        cport = t.client_port
    line = proxy.connection_log(cport)
    assert line.get("outcome") == "allowed", line.raw
    assert len(origin.resumed) == before + 1, f"expected one upstream handshake, saw {origin.resumed[before:]}"
    return origin.resumed[-1], RESUMED in line.get("detail", "")


def fetch_resumed(proxy, origin, host: str) -> None:
    """The connection resumes. A TLS 1.3 ticket reaches the daemon after the handshake, so the
    first connection after a fresh one may still come too early for it: poll."""
    poll(lambda: fetch(proxy, origin, host) == (True, True), what=f"a resumed connection to {host}")


def refused_upstream(proxy, origin, host: str, reason: str) -> bool:
    """CONNECT that is refused after the upstream handshake; whether that handshake resumed."""
    before = len(origin.resumed)
    expect_refusal(proxy, host, origin.port, reason)
    # The daemon refuses once its side of the handshake is done; the origin records its side
    # on its own thread, possibly a moment later.
    poll(lambda: len(origin.resumed) > before, what="the origin's record of the upstream handshake")
    assert len(origin.resumed) == before + 1, f"expected one upstream handshake, saw {origin.resumed[before:]}"
    return origin.resumed[-1]


def test_verdict_runs_on_a_resumed_connection(make_proxy, pki, api_origin):
    issuer = pki.issued("int-a")
    empty = pkilib.make_crl(issuer, [], dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc), dt.datetime(2045, 1, 1, tzinfo=dt.timezone.utc))
    revoking = pkilib.make_crl(issuer, [pki.issued("api").serial], dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc),
                               dt.datetime(2045, 1, 1, tzinfo=dt.timezone.utc), crl_number=2)
    p = make_proxy(start=False, proxy={"allow_ports": [api_origin.port]}, resolve={API: "127.0.0.1"},
                   hosts={API: {"trust": ["root-a.pem"], "revocation": "crl", "crls": ["live-crl.pem"]}})
    pkilib.write_pem(p.dir / "live-crl.pem", empty)
    p.start()

    assert fetch(p, api_origin, API) == (False, False)
    fetch_resumed(p, api_origin, API)

    # The CA revokes the leaf. The entry's policy is the same, so its session is kept...
    pkilib.write_pem(p.dir / "live-crl.pem.tmp", revoking)
    (p.dir / "live-crl.pem.tmp").replace(p.dir / "live-crl.pem")
    assert p.reload().get("outcome") == "ok"
    # ...and resumed, and the verdict on the stored chain refuses it.
    assert refused_upstream(p, api_origin, API, "revoked") is True
    # A refused session is forgotten: the next handshake is a full one (and refused too).
    assert refused_upstream(p, api_origin, API, "revoked") is False


def test_concurrent_connections_all_resume(make_proxy, pki, api_origin):
    p = start(make_proxy, api_origin.port, {API: {"trust": ["root-a.pem"]}})
    assert fetch(p, api_origin, API) == (False, False)
    fetch_resumed(p, api_origin, API)

    def one(_):
        with Tunnel(p, API, api_origin.port) as t:
            return t.get("/small")

    before = len(api_origin.resumed)
    # Waves of 16 at once: while some connections receive their new tickets, others are still
    # offering the cached session. Before the fix about half of them fell back to full handshakes.
    with ThreadPoolExecutor(16) as pool:
        for _ in range(4):
            assert list(pool.map(one, range(16))) == [(200, originlib.SMALL_BODY)] * 16
    poll(lambda: len(api_origin.resumed) >= before + 64, what="the origin's record of 64 handshakes")
    handshakes = api_origin.resumed[before:]
    assert handshakes == [True] * 64, f"{handshakes.count(False)} of 64 upstream handshakes were full ones"


def test_a_session_never_crosses_hosts(make_proxy, pki, api_origin):
    # api.test is lax (any chain to root-a), www.api.test strict (pinned); same address and port.
    p = start(make_proxy, api_origin.port, {API: {"trust": ["root-a.pem"]}, WWW: pinned_entry(pki, "api", "int-a")})
    assert fetch(p, api_origin, API) == (False, False)
    fetch_resumed(p, api_origin, API)

    # The lax host's session is not offered for the strict host.
    assert fetch(p, api_origin, WWW) == (False, False)
    fetch_resumed(p, api_origin, WWW)  # which has its own session from then on

    # The test can fail: this origin would resume api.test's session under the other name.
    ctx = ssl.create_default_context(cafile=str(pki.path("root-a.pem")))
    with socket.create_connection(("127.0.0.1", api_origin.port), timeout=TIMEOUT) as raw, \
            ctx.wrap_socket(raw, server_hostname=API) as first:
        first.sendall(b"GET /small HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n")
        while first.recv(65536):
            pass
        session = first.session
    with socket.create_connection(("127.0.0.1", api_origin.port), timeout=TIMEOUT) as raw, \
            ctx.wrap_socket(raw, server_hostname=WWW, session=session) as second:
        assert second.session_reused, "the origin does not resume across names: this test could not fail"


def test_reload_drops_the_sessions_of_changed_entries(make_proxy, pki, api_origin):
    p = start(make_proxy, api_origin.port, {API: pinned_entry(pki, "api", "int-a"), WWW: pinned_entry(pki, "api", "int-a")})
    for host in (API, WWW):
        fetch(p, api_origin, host)
        fetch_resumed(p, api_origin, host)

    # A reload that fails changes nothing, sessions included.
    p.write_config(p.render() + "\n[broken\n")
    assert p.reload().get("outcome") == "failed"
    assert fetch(p, api_origin, API) == (True, True)

    # api.test gains a backup pin (still allowed); www.api.test is unchanged.
    p.hosts[API]["pins"] = p.hosts[API]["pins"] + [PIN_X]
    p.write_config()
    assert p.reload().get("outcome") == "ok"
    assert fetch(p, api_origin, API) == (False, False)
    assert fetch(p, api_origin, WWW) == (True, True)


# --------------------------------------------------------------------------
# ocsp-staple: an origin that staples (openssl s_server -status_file)


class StaplingOrigin:
    """`openssl s_server -www`: serves the api chain with a stapled OCSP response; its page says
    whether the session was "Reused" or "New"."""

    def __init__(self, pki, directory):
        api, issuer = pki.issued("api"), pki.issued("int-a")
        now = dt.datetime.now(dt.timezone.utc)
        staple = directory / "staple.der"
        staple.write_bytes(pkilib.to_der(pkilib.make_ocsp(api, issuer, "good", now - dt.timedelta(days=1),
                                                          now + dt.timedelta(days=7))))
        self.port = free_port()
        self.proc = subprocess.Popen(
            [shutil.which("openssl"), "s_server", "-accept", f"127.0.0.1:{self.port}", "-www", "-quiet",
             "-cert", str(pki.path("api.pem")), "-key", str(pki.path("api.key")),
             "-cert_chain", str(pki.path("int-a.pem")), "-status_file", str(staple)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        poll(lambda: self.proc.poll() is None and port_accepts(self.port), what="openssl s_server to listen")

    def close(self):
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def stapling_origin(pki, tmp_path):
    if not shutil.which("openssl"):
        pytest.fail("openssl(1) is not installed (scripts/setup --tests installs it)", pytrace=False)
    o = StaplingOrigin(pki, tmp_path)
    yield o
    o.close()


def fetch_page(proxy, origin, host: str) -> tuple[str, bool]:
    """GET / from s_server through the proxy: ("Reused" | "New", the daemon's log says resumed)."""
    with Tunnel(proxy, host, origin.port) as t:
        t.conn.request("GET", "/", headers={"Host": host})
        page = t.conn.getresponse().read().decode("latin-1")
        cport = t.client_port
    line = proxy.connection_log(cport)
    assert line.get("outcome") == "allowed", line.raw
    kind = "Reused" if "\nReused, " in page else "New" if "\nNew, " in page else pytest.fail(f"no session line in:\n{page}")
    return kind, RESUMED in line.get("detail", "")


def test_ocsp_staple_entries_are_never_resumed(make_proxy, stapling_origin):
    p = start(make_proxy, stapling_origin.port,
              {API: {"trust": ["root-a.pem"], "revocation": "ocsp-staple"}, WWW: {"trust": ["root-a.pem"]}})
    # Control: the same server resumes a session for an entry without staples.
    assert fetch_page(p, stapling_origin, WWW) == ("New", False)
    poll(lambda: fetch_page(p, stapling_origin, WWW) == ("Reused", True), what="a resumed connection to www.api.test")
    # The stapled entry is allowed (the staple is good) and never resumes.
    for _ in range(4):
        assert fetch_page(p, stapling_origin, API) == ("New", False)
