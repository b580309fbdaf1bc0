"""`pinproxy run`: out of descriptors, every listener pauses instead of spinning on accept.

The daemon's open-file limit is lowered under it (prlimit --pid) to a few descriptors above
what it holds, so that admin clients use the rest and accept(2) fails with EMFILE on the
metrics listener, and then on the proxy listeners. Before, libevent retried at once and logged
`Error from accept() call: Too many open files` tens of thousands of times; now each listener
stops accepting for a second, with one `accept-failed` line per pause. Once the admin deadline
has cut the clients, /healthz answers and a proxy client is served again.
"""

from __future__ import annotations

import subprocess
import time

from admin_drip import Drippers, LimitedProxy
from proxy_harness import API, TIMEOUT, connect, free_port, origins, pinned_entry, poll, proxy_factory  # noqa: F401
from service_support import http_get

import pytest

SPARE = 6  # descriptors left to the daemon beyond those it holds when the limit drops


@pytest.fixture
def make_limited(pinproxy, pki, tmp_path):
    yield from proxy_factory(LimitedProxy, pinproxy, pki, tmp_path)


def healthz(port: int) -> int:
    try:
        return http_get(port, "/healthz", timeout=5)[0]
    except OSError:
        return 0


def test_accept_pauses_on_emfile_and_resumes(make_limited, origins, pki):
    mport = free_port()
    p = make_limited(proxy={"allow_ports": [origins.api.port], "metrics_listen": f"127.0.0.1:{mport}",
                            "admin_timeout": 2, "workers": 2},
                     hosts={API: pinned_entry(pki, "api", "int-a")})
    assert poll(lambda: healthz(mport) == 200, what="/healthz")
    limit = p.descriptors() + SPARE
    lowered = subprocess.run(["prlimit", f"--pid={p.pid}", f"--nofile={limit}:{limit}"], capture_output=True, text=True)
    assert lowered.returncode == 0, lowered.stderr

    started = time.monotonic()
    drippers = Drippers(mport, 3 * SPARE, interval=0.3)
    try:
        mark = p.mark()
        p.wait_for_log(lambda l: l.get("event") == "accept-failed" and l.get("address") == f"127.0.0.1:{mport}",
                       since=mark, what="accept-failed on the metrics listener")
        # Proxy clients meanwhile: their accepts fail too, and pause the proxy listeners.
        for _ in range(3):
            try:
                connect(p.port, API, origins.api.port, timeout=3).close()
            except (OSError, AssertionError):
                pass
        poll(drippers.all_closed, timeout=3 * TIMEOUT, what="every dripper closed by the admin deadline")
    finally:
        drippers.close()
    elapsed = time.monotonic() - started

    assert poll(lambda: healthz(mport) == 200, what="/healthz once the drippers are gone")
    c = connect(p.port, API, origins.api.port)
    c.close()
    assert c.answer.status == 200, c.answer
    p.assert_alive()

    raw = p.raw_lines()
    assert not [l for l in raw if "Error from accept" in l], "\n".join(raw[-20:])
    failed = [l for l in p.logs() if l.get("event") == "accept-failed"]
    assert all("Too many open files" in l.get("detail", "") and "pauses" in l.get("detail", "") for l in failed), failed
    listeners = 1 + 2  # metrics + one proxy listener per worker
    assert len(failed) <= listeners * (elapsed + 2), f"{len(failed)} accept-failed lines in {elapsed:.1f} s"
