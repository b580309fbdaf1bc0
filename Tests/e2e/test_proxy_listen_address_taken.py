"""`pinproxy run`: a listen address another process listens on stops the start.

The workers bind with SO_REUSEPORT, which the kernel also grants to a second process of the
same user: two daemons on one address would split clients between two policies. The second
daemon must exit 1 and say why, while the first goes on answering every client; the same goes
for any other program listening there with SO_REUSEPORT. (Sockets from systemd are exempt:
test_service covers socket activation.)
"""

from __future__ import annotations

import socket

import pytest

from proxy_harness import TIMEOUT, connect, make_proxy  # noqa: F401 (fixture)


@pytest.fixture(autouse=True)
def crowd():
    """Hundreds of other listening sockets, so that the daemon's look at /proc/net/tcp has to
    read well past its first page."""
    socks = []
    for _ in range(400):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        socks.append(s)
    yield
    for s in socks:
        s.close()


def refused_start(make_proxy, port: int) -> str:
    p = make_proxy(start=False, port=port, proxy={"allow_ports": [443]})
    p.start(wait=False)
    assert p.wait_exit(TIMEOUT) == 1, p.describe()
    p._stopped = True  # the exit is what the test expects
    failed = [l for l in p.logs() if l.get("event") == "start-failed"]
    assert failed, p.describe()
    return failed[-1].get("error", "")


def test_a_second_daemon_on_the_same_address_refuses_to_start(make_proxy):
    first = make_proxy(proxy={"allow_ports": [443]}, default={"action": "deny"})
    error = refused_start(make_proxy, first.port)
    assert f"another process already listens on 127.0.0.1:{first.port}" in error, error

    # Every client still reaches the first daemon, and only it.
    for _ in range(20):
        c = connect(first.port, "denied.example", 443)
        c.close()
        assert c.answer.status == 403 and c.answer.refusal == "host-denied", c.answer
        first.connection_log(c.client_port)
    first.assert_alive()


def test_another_programs_reuseport_listener_stops_the_start(make_proxy):
    other = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", 0))
        other.listen(8)
        port = other.getsockname()[1]
        error = refused_start(make_proxy, port)
        assert f"another process already listens on 127.0.0.1:{port}" in error, error
    finally:
        other.close()
