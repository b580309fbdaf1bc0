"""A TLS 1.2 origin that renegotiates to another certificate after its first response.

Run with a Python that has pyOpenSSL (the Debian python3 with python3-openssl, installed by
scripts/setup): the standard library's ssl module cannot start a renegotiation.

    /usr/bin/python3 renegotiating_origin.py FIRST_CHAIN FIRST_KEY SECOND_CHAIN SECOND_KEY

Prints its port, then serves one connection: it reads a request, answers with BEFORE (no
Content-Length; the body runs to the end of the connection), switches to the second
certificate, sends a HelloRequest and waits for the new handshake. If the handshake
completes, it sends AFTER. Each step is reported on stdout, one line each.
"""

import signal
import socket
import sys

from OpenSSL import SSL

BEFORE = b"bytes-sent-under-the-first-certificate\n"
AFTER = b"bytes-sent-after-renegotiation\n"


def context(chain: str, key: str) -> SSL.Context:
    ctx = SSL.Context(SSL.TLSv1_2_METHOD)
    ctx.set_min_proto_version(SSL.TLS1_2_VERSION)
    ctx.set_max_proto_version(SSL.TLS1_2_VERSION)
    ctx.use_certificate_chain_file(chain)
    ctx.use_privatekey_file(key)
    return ctx


def say(line: str) -> None:
    print(line, flush=True)


def main() -> int:
    first, second = context(sys.argv[1], sys.argv[2]), context(sys.argv[3], sys.argv[4])
    listener = socket.create_server(("127.0.0.1", 0))
    say(str(listener.getsockname()[1]))
    raw, _ = listener.accept()
    signal.alarm(60)  # blocking I/O (pyOpenSSL takes no socket timeouts): bounded life instead
    conn = SSL.Connection(first, raw)
    conn.set_accept_state()
    conn.do_handshake()
    say("handshake")
    request = b""
    while b"\r\n\r\n" not in request:
        request += conn.recv(4096)
    conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + BEFORE)
    say("sent-before")
    conn.set_context(second)
    try:
        conn.renegotiate()
        conn.do_handshake()  # sends the HelloRequest
        while conn.renegotiate_pending():
            conn.recv(1)  # drives the new handshake
        say("renegotiated")
        conn.sendall(AFTER)
        say("sent-after")
        conn.shutdown()
    except (SSL.Error, OSError) as e:
        say(f"renegotiation-failed {e!r}")
    raw.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
