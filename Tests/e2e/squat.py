"""What a squatter on the transparent port does, shared by the namespace tests
(test_capture_transparent_port.py) and the systemd-box tests (test_systemd_box.py).

`SQUAT_SOCKET` is Python source, put before each squatter script that runs as another user: it
defines `squat(address, reuseport, port)`, a socket listening on PORT at ADDRESS ("::" with
IPV6_V6ONLY off, so that it covers IPv4 too), with SO_REUSEADDR and, when REUSEPORT, SO_REUSEPORT.
A refused bind raises OSError (the socket closed). It also names SQUAT_ADDRESSES, every address a
squatter tries (each with and without SO_REUSEPORT).
"""

SQUAT_SOCKET = r"""
import socket

SQUAT_ADDRESSES = ("127.0.0.1", "::1", "0.0.0.0", "::")

def squat(address, reuseport, port):
    s = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuseport:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    if address == "::":
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    try:
        s.bind((address, port))
        s.listen(16)
    except OSError:
        s.close()
        raise
    return s
"""

