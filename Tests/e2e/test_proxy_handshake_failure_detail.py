"""`pinproxy run`: the detail of a handshake-failed refusal names OpenSSL's real errors only.

libevent's TLS bufferevent queues the `SSL_get_error` result of a failed call among the
error codes; printed as one it read `error:00000001:lib(0)::reason(1)` at the end of every
handshake failure. Two upstreams: one that answers the ClientHello with cleartext HTTP (a
protocol error, whose detail must carry OpenSSL's message), and one that closes the
connection mid-handshake (OpenSSL's "unexpected eof", or, without any queued error, a
sentence saying the connection closed).
"""

from __future__ import annotations

import socket
import threading

from proxy_harness import (
    API,
    expect_refusal,
    make_proxy,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    pinned_entry,
)


class ClosingOrigin:
    """Reads the ClientHello, then closes the connection without a word."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    conn.recv(4096)
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


def test_handshake_failure_details_hold_no_ssl_get_error_values(make_proxy, origins, pki):
    closing = ClosingOrigin()
    try:
        p = make_proxy(proxy={"allow_ports": [origins.plain.port, closing.port], "handshake_timeout": 5},
                       hosts={API: pinned_entry(pki, "api", "int-a")})

        ans, line = expect_refusal(p, API, origins.plain.port, "handshake-failed")
        detail = line.get("detail", "")
        assert "lib(0)" not in detail and "lib(0)" not in ans.text, line.raw
        assert "error:0A" in detail, f"the detail lacks OpenSSL's own error:\n{line.raw}"

        ans, line = expect_refusal(p, API, closing.port, "handshake-failed")
        detail = line.get("detail", "")
        assert "lib(0)" not in detail and "lib(0)" not in ans.text, line.raw
        assert "unexpected eof" in detail or "closed during the handshake" in detail, line.raw
    finally:
        closing.close()
