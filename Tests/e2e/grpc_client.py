"""A gRPC unary call through pinproxy, from a process of its own (grpcio reads `grpc_proxy`
once per process). It prints the answer, or `ERROR CODE` and then the error's details on the
next line, exiting 3."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from proxy_harness import clean_env

GRPC_CLIENT = textwrap.dedent("""
    import sys, grpc
    target, ca = sys.argv[1], sys.argv[2]
    credentials = grpc.ssl_channel_credentials(root_certificates=open(ca, "rb").read())
    with grpc.secure_channel(target, credentials) as channel:
        echo = channel.unary_unary("/pinproxy.Test/Echo")
        try:
            print(echo(b"ping", timeout=20).decode())
        except grpc.RpcError as error:
            print("ERROR", error.code().name)
            print(error.details())
            sys.exit(3)
""")


def grpc_call(proxy, host: str, port: int) -> subprocess.CompletedProcess:
    """A unary call from a fresh process that reaches HOST:PORT through grpc_proxy."""
    env = clean_env(grpc_proxy=proxy.url, GRPC_VERBOSITY="ERROR")
    return subprocess.run([sys.executable, "-c", GRPC_CLIENT, f"{host}:{port}", str(proxy.ca_path)],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=env)
