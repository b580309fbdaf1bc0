"""`pinproxy pin --connect` and `pinproxy diagnose` against servers that stall or trickle.

The server (`flight_origin.FlightServer`) is a real TLS 1.2 server whose first flight reaches
the client as the test says: the certificates at once or not, the rest never or one byte a
second.

- Certificates, then a stall: `pin --connect` prints the chain that arrived (pins and the
  ready-to-paste block), says on stderr that the handshake did not complete, and exits 1.
- A trickle, from the first byte or after the certificates: `--timeout` bounds connect,
  handshake and read together, so both commands exit within the timeout + 1 s, print whatever
  certificates arrived, say "timed out", and exit 1. Before the whole exchange had a deadline,
  each byte restarted the timeout and the handshake ran for minutes.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from conftest import pkilib  # noqa: F401
from flight_origin import CERTIFICATE, SERVER_HELLO, FlightServer

TIMEOUT = 3


@pytest.fixture
def serve(pki):
    servers: list[FlightServer] = []

    def start(*, fast: tuple[int, ...], rest: str) -> FlightServer:
        server = FlightServer(str(pki.path("api-chain.pem")), str(pki.path("api.key")), fast=fast, rest=rest)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def run_bounded(ws, *args, bound: float):
    """Runs pinproxy; fails the test when it is still running after `bound` seconds."""
    argv = [str(ws.bin), *map(str, args)]
    started = time.monotonic()
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=bound)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"{' '.join(argv)} was still running after {bound} s (it was killed)\n"
                    f"--- stdout\n{expired.stdout}\n--- stderr\n{expired.stderr}")
    return p, time.monotonic() - started


def test_a_chain_that_arrived_before_a_stall_is_printed(ws, serve, pki):
    server = serve(fast=(SERVER_HELLO, CERTIFICATE), rest="stall")
    res = ws.pin("--connect", f"127.0.0.1:{server.port}", "--timeout", "2")
    assert server.sent_fast.is_set()
    assert res.code == 1, res
    assert "did not complete" in res.err, res
    for stem in ("api", "int-a"):
        assert f"public-key: {pki.spki(stem)}" in res.out, res
        assert f"certificate: {pki.cert(stem)}" in res.out, res
    assert '[hosts."127.0.0.1"]' in res.out, res
    assert f'"{pki.spki("api")}",  # leaf' in res.out, res


# The bound: the whole exchange within the timeout + 1 s. A sanitizer build starts and
# prints several times slower, so it gets more room after the timeout (the timeout itself is
# the same).
SLACK = 4 if os.environ.get("PINPROXY_SANITIZER") else 1

COMMANDS = {
    "pin": lambda port: ["pin", "--connect", f"127.0.0.1:{port}"],
    "diagnose": lambda port: ["diagnose", f"api.test:{port}", "--connect-to", "127.0.0.1"],
}


@pytest.mark.parametrize("command", COMMANDS, ids=list(COMMANDS))
def test_a_handshake_trickling_from_the_first_byte_times_out(ws, serve, command):
    """The issue's reproduction: the whole handshake one byte a second."""
    server = serve(fast=(), rest="trickle")
    p, elapsed = run_bounded(ws, *COMMANDS[command](server.port), "--timeout", TIMEOUT, bound=TIMEOUT + SLACK)
    assert server.trickled.is_set(), "the server sent nothing"
    assert p.returncode == 1, p
    assert "timed out after 3 s" in p.stdout + p.stderr, p
    assert elapsed < TIMEOUT + SLACK, elapsed
    if command == "diagnose":
        assert "verdict: refuse: upstream-timeout" in p.stdout, p


@pytest.mark.parametrize("command", COMMANDS, ids=list(COMMANDS))
def test_a_handshake_trickling_after_the_certificates_times_out_and_prints_them(ws, serve, pki, command):
    """The certificates arrive at once, the rest of the handshake one byte a second: what arrived
    is printed, with the timeout."""
    server = serve(fast=(SERVER_HELLO, CERTIFICATE), rest="trickle")
    p, elapsed = run_bounded(ws, *COMMANDS[command](server.port), "--timeout", TIMEOUT, bound=TIMEOUT + SLACK)
    assert server.sent_fast.is_set() and server.trickled.is_set()
    assert p.returncode == 1, p
    assert "timed out after 3 s" in p.stdout + p.stderr, p
    assert elapsed < TIMEOUT + SLACK, elapsed
    for stem in ("api", "int-a"):
        assert f"public-key: {pki.spki(stem)}" in p.stdout, p
        assert f"certificate: {pki.cert(stem)}" in p.stdout, p
    if command == "pin":
        assert "did not complete" in p.stderr, p
        assert f'"{pki.spki("api")}",  # leaf' in p.stdout, p
    else:
        assert "certificates that arrived before it stopped" in p.stdout, p
        assert "verdict: refuse: upstream-timeout" in p.stdout, p
