#!/usr/bin/env python3
"""What one idle tunnel holds in pinproxy's heap, by allocation site: pinproxy runs under
valgrind's massif against a local nginx (as in proxy-bench.py); after a warm-up of 500 new
connections a heap snapshot is taken, N_IDLE tunnels are opened (CONNECT, TLS, one request) and
held, and a second snapshot is taken. The difference, divided by the tunnels, is printed as a
tree of the allocating functions (bytes per tunnel; sites under --min-bytes are left out).
Not a test: it prints the tree and exits 0. Takes about two minutes.

    Benchmarks/idle-heap.py [--bin .build/release/pinproxy] [--n-idle 300] [--depth 4] [--min-bytes 64]

Libraries without symbols show as ???; the depth of the tree is the depth of the call stacks
shown below each allocator entry point.
"""

import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as b  # noqa: E402


def snapshot_tree(path):
    """A massif detailed snapshot as {call path (tuple of names): bytes}; the heap's totals are
    under ("mem_heap_B",) (the bytes asked for) and ("mem_heap_extra_B",) (malloc's headers and
    rounding)."""
    tree, stack = {}, []
    for line in open(path):
        total = re.match(r"^(mem_heap_B|mem_heap_extra_B)=(\d+)$", line.strip())
        if total:
            tree[(total.group(1),)] = int(total.group(2))
            continue
        match = re.match(r"^( *)n\d+: (\d+) (.*)$", line.rstrip("\n"))
        if not match:
            continue
        depth = len(match.group(1))
        name = re.sub(r"^0x[0-9A-F]+: ", "", match.group(3))
        name = re.sub(r" \(in [^)]*\)$", "", name)[:120]
        stack = stack[:depth] + [name]
        tree[tuple(stack)] = tree.get(tuple(stack), 0) + int(match.group(2))
    return tree


def main():
    parser = b.argument_parser(__doc__)
    parser.add_argument("--n-idle", type=int, default=300)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--min-bytes", type=int, default=64)
    options = parser.parse_args()
    b.require_binary(options.bin)
    b.raise_open_file_limit()
    work = b.work_directory("pinproxy-heap.")
    pki = os.path.join(work, "pki")
    pin = b.make_pki(pki, "rsa2048")
    origin = b.Origin(work, pki)
    binary = b.valgrind_binary(options.bin, work)
    wrapper = ("valgrind", "--tool=massif", "--threshold=0.02", "--depth=30",
               f"--massif-out-file={os.path.join(work, 'massif.out')}")
    daemon = b.Daemon(binary, work, pki, origin, pin, log_path=os.path.join(work, "pinproxy.log"), wrapper=wrapper,
                      start_timeout=600)
    tunnels = []
    try:
        env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
        subprocess.run(["curl", "--http1.1", "-sS", "--cacert", daemon.ca_path, "-x", f"http://127.0.0.1:{daemon.port}",
                        "--no-sessionid", "-H", "Connection: close", "--parallel", "--parallel-max", "32", "-o", "/dev/null",
                        f"https://localhost:{origin.port}/small.txt?w=[1-500]"], env=env, check=True, capture_output=True)
        time.sleep(1)

        def snapshot(name):
            path = os.path.join(work, name)
            subprocess.run(["vgdb", f"--pid={daemon.pid}", "detailed_snapshot", path], check=True, capture_output=True)
            b.wait_for(lambda: os.path.exists(path), 60, f"the {name} snapshot")
            time.sleep(0.5)
            return snapshot_tree(path)

        before = snapshot("before")
        context = b.client_context(daemon.ca_path)
        with ThreadPoolExecutor(32) as pool:
            tunnels = list(pool.map(lambda _: b.open_tunnel(daemon.port, context, origin.port), range(options.n_idle)))
        time.sleep(2)
        held = snapshot("held")
    finally:
        for tunnel in tunnels:
            tunnel.close()
        daemon.stop()
        origin.stop()
    n = options.n_idle
    totals = ("mem_heap_B", "mem_heap_extra_B")
    asked, extra = ((held.get((key,), 0) - before.get((key,), 0)) / n for key in totals)
    print(f"heap per idle tunnel ({n} tunnels): {asked:.0f} bytes asked for, {extra:.0f} more in malloc's headers and rounding")
    print("bytes by allocation site:")
    rows = []
    for path in set(before) | set(held):
        if path[0] in totals:
            continue
        per_tunnel = (held.get(path, 0) - before.get(path, 0)) / n
        if len(path) <= options.depth and abs(per_tunnel) >= options.min_bytes:
            rows.append((path, per_tunnel))
    for path, per_tunnel in sorted(rows):
        print(f"{'  ' * (len(path) - 1)}{per_tunnel:8.0f}  {path[-1]}")
    subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
