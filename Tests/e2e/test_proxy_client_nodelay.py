"""`pinproxy run`: accepted client sockets have TCP_NODELAY.

Without it, a TLS 1.3 server's session tickets sent right after the client's handshake wait
for the client's delayed ACK (Nagle), and some new connections stall ~40 ms before their first
response byte. The test reads the option on the daemon's own socket: it takes a duplicate of
the descriptor with pidfd_getfd(2) (the daemon is a child of the test process).
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket

import pytest

from proxy_harness import API, make_proxy, origins, pinned_entry, poll  # noqa: F401 (fixtures)

SYS_PIDFD_GETFD = 438  # x86-64 and arm64 alike
libc = ctypes.CDLL(None, use_errno=True)


def daemon_socket(pid: int, peer: tuple[str, int]) -> socket.socket | None:
    """A duplicate of the daemon's TCP socket whose peer is PEER, or None."""
    pidfd = os.pidfd_open(pid)
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            # The daemon opens and closes descriptors while we look: one gone is not ours.
            try:
                if not os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
                    continue
            except FileNotFoundError:
                continue
            fd = libc.syscall(SYS_PIDFD_GETFD, pidfd, int(name), 0)
            if fd < 0:
                if ctypes.get_errno() == errno.EBADF:
                    continue
                pytest.skip(f"pidfd_getfd is not permitted here (errno {ctypes.get_errno()})")
            try:
                s = socket.socket(fileno=fd)
            except OSError:  # the number was reused for something else meanwhile
                os.close(fd)
                continue
            try:
                if s.type == socket.SOCK_STREAM and s.getpeername() == peer:
                    return s
            except OSError:
                pass
            s.close()
        return None
    finally:
        os.close(pidfd)


def test_accepted_client_sockets_have_tcp_nodelay(make_proxy, origins, pki):
    p = make_proxy(proxy={"allow_ports": [origins.silent.port], "handshake_timeout": 30},
                   hosts={API: pinned_entry(pki, "api", "int-a")})
    client = socket.create_connection(("127.0.0.1", p.port))
    # The connection waits on the silent origin's handshake: both of its sockets are open.
    client.sendall(f"CONNECT {API}:{origins.silent.port} HTTP/1.1\r\n\r\n".encode())
    try:
        accepted = poll(lambda: daemon_socket(p.pid, client.getsockname()), what="the daemon's socket for the client")
        with accepted:
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        upstream = poll(lambda: daemon_socket(p.pid, ("127.0.0.1", origins.silent.port)), what="the daemon's upstream socket")
        with upstream:
            assert upstream.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        client.close()
