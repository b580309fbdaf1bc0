#!/usr/bin/env python3
"""pinproxy beside a direct connection to a local TLS origin (Debian nginx, RSA-2048, TLS 1.3),
all on loopback. Not a test: it prints a table and exits 0.

    Benchmarks/proxy-bench.py [--bin .build/release/pinproxy] [--runs 3] [--n-new 500] [--conc 32]
                              [--n-ka 5000] [--bulk-mib 256] [--n-idle 1000] [--figures new1,new32,ka,bulk,idle]
    Benchmarks/proxy-bench.py --instructions   # the same work under callgrind: instructions per unit (new connections at c=1 and c=CONC)
    Benchmarks/proxy-bench.py --transparent --figures new1,new32   # also through the transparent listener (root)

Figures (curl is the client, as in ../shared/bench; pinproxy pins the origin's key; curl never
resumes its own TLS session, pinproxy resumes upstream):
  new1   mean latency of N_NEW sequential new connections (TCP + CONNECT + full TLS 1.3 handshake)
  new32  req/s of N_NEW new connections, 32 at a time, and pinproxy's CPU (user + system) per connection
  ka     req/s of N_KA requests over one tunnel, and pinproxy's CPU per request
  bulk   MB/s of one BULK_MIB download, and pinproxy's CPU per GB
  idle   pinproxy's RSS per idle tunnel: N_IDLE tunnels (CONNECT, TLS, one request) held open
Direct and pinproxy runs alternate (interleaved), medians of RUNS. On a shared machine rely on the
CPU figures and the instruction counts (--instructions), not on wall-clock rates.

--transparent adds a third peer: the same daemon's transparent listener, curl with no proxy at all,
sent there by the egress lock (`pinproxy egress apply`, capturing the origin's port). The run then
happens in a network namespace of its own (unshare -n, so the host's ruleset is never touched), as
root; curl runs as user nobody there, since root is the exempt user (pinproxy's own connections).
"""

import os
import signal
import re
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as b  # noqa: E402


def curl(args, url, ca, proxy_port, as_nobody=False, expect_error=False):
    """Runs curl; returns its output and its wall seconds. curl's errors (one line per failed
    transfer) are logged unless one is expected."""
    command = ["curl", "--http1.1", "-sS", "--cacert", ca, "--max-time", "120", *args]
    command += ["-x", f"http://127.0.0.1:{proxy_port}"] if proxy_port else ["--noproxy", "*"]
    if as_nobody:  # not exempt from the egress lock: captured
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    started = time.monotonic()
    result = subprocess.run(command + [url], capture_output=True, text=True, env=env, timeout=600)
    errors = [line for line in result.stderr.splitlines() if line.startswith("curl: (")]
    if errors and not expect_error:
        b.log(f"curl exited {result.returncode}: " + "; ".join(errors))
    return result.stdout, time.monotonic() - started


class Bench:
    def __init__(self, options):
        self.options = options
        b.raise_open_file_limit()
        self.work = b.work_directory("pinproxy-bench.")
        b.log(f"work directory {self.work}")
        pki = os.path.join(self.work, "pki")
        pin = b.make_pki(pki, options.origin_key)
        self.origin_ca = os.path.join(pki, "origin-ca.pem")
        self.origin = b.Origin(self.work, pki, large_mib=options.bulk_mib if "bulk" in options.figures else 0)
        wrapper = ()
        binary = options.bin
        if options.instructions:
            binary = b.valgrind_binary(options.bin, self.work)
            self.callgrind_out = os.path.join(self.work, "callgrind.out")
            wrapper = ("valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={self.callgrind_out}")
        extra_proxy = extra_tables = ""
        if options.transparent:
            listener = 8  # privileged, as `egress apply` requires (the default transparent port)
            extra_proxy = f'transparent_listen = ["127.0.0.1:{listener}", "[::1]:{listener}"]'
            extra_tables = f'\n[capture]\nports = [{self.origin.port}]\nlocal = true\nexempt_users = ["root"]\n'
        self.daemon = b.Daemon(binary, self.work, pki, self.origin, pin, log_path=os.path.join(self.work, "pinproxy.log"),
                               wrapper=wrapper, extra_proxy=extra_proxy, extra_tables=extra_tables, start_timeout=600)
        if options.transparent:
            subprocess.run([binary, "egress", "apply", "--config", self.daemon.config], check=True, capture_output=True)
            # User nobody must read the CA it trusts.
            self.public_ca = os.path.join(self.work, "pinproxy-ca.pem")
            subprocess.run(["install", "-m", "0644", self.daemon.ca_path, self.public_ca], check=True)
        if options.instructions:
            subprocess.run(["callgrind_control", "-i", "on", str(self.daemon.pid)], check=True, capture_output=True)
        self.results = {}  # (figure, peer) -> [values]
        self.answered = {}  # peer -> [new connections made, not answered 200]

    def url(self, path):
        return f"https://localhost:{self.origin.port}{path}"

    def peers(self):
        """(name, proxy port, CA, captured): captured peers are curl as nobody, with no proxy."""
        peers = [("direct", None, self.origin_ca, False), ("pinproxy", self.daemon.port, self.daemon.ca_path, False)]
        if self.options.transparent:
            peers.append(("transparent", None, self.public_ca, True))
        return peers

    def record(self, figure, peer, value):
        self.results.setdefault((figure, peer), []).append(value)

    def measured(self, peer_port, work):
        """Runs work(); returns (its result, pinproxy CPU seconds meanwhile, wall seconds)."""
        cpu0 = b.cpu_seconds(self.daemon.pid)
        started = time.monotonic()
        result = work()
        wall = time.monotonic() - started
        return result, b.cpu_seconds(self.daemon.pid) - cpu0, wall

    def check(self):
        for name, port, ca, captured in self.peers():
            out, _ = curl(["-o", "/dev/null", "-w", "%{http_code}"], self.url("/small.txt"), ca, port, captured)
            if out != "200":
                raise SystemExit(f"{name}: sanity request answered {out!r}")
        out, _ = curl(["-o", "/dev/null", "-w", "%{http_connect}"], f"https://localhost:{self.origin.altkey_port}/small.txt",
                      self.daemon.ca_path, self.daemon.port, expect_error=True)
        if out != "403":
            raise SystemExit(f"pinproxy did not refuse the pin-mismatch origin (answered {out!r})")
        # Warm-up: minted leaf, upstream session, allocator.
        curl(["--no-sessionid", "-H", "Connection: close", "--parallel", "--parallel-max", "8", "-o", "/dev/null"],
             self.url("/small.txt?w=[1-50]"), self.daemon.ca_path, self.daemon.port)
        if self.options.transparent:
            curl(["--no-sessionid", "-H", "Connection: close", "--parallel", "--parallel-max", "8", "-o", "/dev/null"],
                 self.url("/small.txt?w=[1-50]"), self.public_ca, None, True)

    def new_connections(self, run, conc):
        n = self.options.n_new
        # Per transfer: its status, its time, and for a failure curl's exit code, error and local port.
        args = ["--no-sessionid", "-H", "Connection: close", "-o", "/dev/null", "-w",
                "%{http_code} %{time_total} %{exitcode} %{local_port} %{errormsg}\n"]
        if conc > 1:
            args += ["--parallel", "--parallel-immediate", "--parallel-max", str(conc)]
        figure = f"new{conc}"
        for name, port, ca, captured in rotate(self.peers(), run):
            (out, _), cpu, wall = self.measured(port, lambda: curl(args, self.url(f"/small.txt?n=[1-{n}]"), ca, port, captured))
            lines = [line.split(maxsplit=4) for line in out.splitlines() if line.strip()]
            ok = [float(fields[1]) for fields in lines if fields[0] == "200"]
            counts = self.answered.setdefault(name, [0, 0])
            counts[0] += n
            counts[1] += n - len(ok)
            if len(ok) != n:
                b.log(f"WARNING {name} {figure}: {len(ok)} of {n} requests answered 200")
                for fields in lines:
                    if fields[0] != "200":
                        code, seconds, exitcode, local_port, error = (fields + [""] * 5)[:5]
                        # curl trusts pinproxy's CA alone: 60 is the origin's own certificate, met around the lock.
                        around = " (the origin's own certificate: around the egress lock)" if captured and exitcode == "60" else ""
                        b.log(f"  not 200: status {code} after {seconds} s, curl exit {exitcode}, local port {local_port}: {error}{around}")
            self.record(f"{figure}_rps", name, len(ok) / wall)
            if conc == 1:
                self.record("new1_latency_ms", name, 1000 * statistics.mean(ok) if ok else float("nan"))
            if port or captured:
                self.record(f"{figure}_cpu_ms", name, 1000 * cpu / n)
            b.log(f"{name} {figure} run {run}: {len(ok) / wall:.0f} req/s, mean {1000 * statistics.mean(ok):.2f} ms"
                  + (f", pinproxy CPU {1000 * cpu / n:.3f} ms/conn" if port or captured else ""))

    def keep_alive(self, run):
        n = self.options.n_ka
        for name, port, ca, captured in rotate(self.peers(), run):
            (out, _), cpu, wall = self.measured(port, lambda: curl(["-o", "/dev/null", "-w", "%{http_code}\n"],
                                                                   self.url(f"/small.txt?n=[1-{n}]"), ca, port, captured))
            ok = out.split().count("200")
            if ok != n:
                b.log(f"WARNING {name} ka: {ok} of {n} requests answered 200")
            self.record("ka_rps", name, ok / wall)
            if port or captured:
                self.record("ka_cpu_us", name, 1e6 * cpu / n)
            b.log(f"{name} keep-alive run {run}: {ok / wall:.0f} req/s" + (f", pinproxy CPU {1e6 * cpu / n:.1f} µs/request" if port or captured else ""))

    def bulk(self, run):
        size = self.options.bulk_mib << 20
        for name, port, ca, captured in rotate(self.peers(), run):
            (out, _), cpu, wall = self.measured(port, lambda: curl(["-o", "/dev/null", "-w", "%{http_code} %{size_download}"],
                                                                   self.url("/large.bin"), ca, port, captured))
            if out.split() != ["200", str(size)]:
                b.log(f"WARNING {name} bulk: {out!r}")
                continue
            self.record("bulk_MBps", name, size / wall / 1e6)
            if port or captured:
                self.record("bulk_cpu_s_per_GB", name, cpu / (size / 1e9))
            b.log(f"{name} bulk run {run}: {size / wall / 1e6:.0f} MB/s" + (f", pinproxy CPU {cpu / (size / 1e9):.2f} s/GB" if port or captured else ""))

    def idle(self):
        n = self.options.n_idle
        context = b.client_context(self.daemon.ca_path)
        time.sleep(1)
        before = b.rss_kib(self.daemon.pid)
        with ThreadPoolExecutor(32) as pool:
            tunnels = list(pool.map(lambda _: b.open_tunnel(self.daemon.port, context, self.origin.port), range(n)))
        time.sleep(2)
        held = b.rss_kib(self.daemon.pid)
        descriptors = b.open_descriptors(self.daemon.pid)
        for tunnel in tunnels:
            tunnel.close()
        self.record("idle_kib_per_tunnel", "pinproxy", (held - before) / n)
        b.log(f"idle: {n} tunnels, RSS {before} → {held} KiB ({(held - before) / n:.1f} KiB per tunnel), {descriptors} descriptors")

    def instructions(self):
        """Instructions (callgrind) per unit of work: one dump per figure, counters zeroed before."""
        figures = []

        def zero():
            subprocess.run(["callgrind_control", "-z", str(self.daemon.pid)], check=True, capture_output=True)

        def dump(label):
            before = set(os.listdir(self.work))
            subprocess.run(["callgrind_control", "-d", label, str(self.daemon.pid)], check=True, capture_output=True)
            b.wait_for(lambda: set(os.listdir(self.work)) - before, 120, "the callgrind dump")
            time.sleep(1)
            newest = max((os.path.join(self.work, f) for f in set(os.listdir(self.work)) - before), key=os.path.getmtime)
            text = open(newest).read()
            match = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
            return int(match.group(1))

        n_new, n_ka, mib = self.options.n_new, self.options.n_ka, self.options.bulk_mib
        ca, port = self.daemon.ca_path, self.daemon.port
        work = [
            ("instructions per new connection (c=1)", n_new,
             lambda: curl(["--no-sessionid", "-H", "Connection: close", "-o", "/dev/null"], self.url(f"/small.txt?n=[1-{n_new}]"), ca, port)),
            (f"instructions per new connection (c={self.options.conc})", n_new,
             lambda: curl(["--no-sessionid", "-H", "Connection: close", "--parallel", "--parallel-max", str(self.options.conc),
                           "-o", "/dev/null"], self.url(f"/small.txt?n=[1-{n_new}]"), ca, port)),
            ("instructions per keep-alive request", n_ka,
             lambda: curl(["-o", "/dev/null"], self.url(f"/small.txt?n=[1-{n_ka}]"), ca, port)),
        ]
        if self.options.transparent:
            new = ["--no-sessionid", "-H", "Connection: close", "-o", "/dev/null"]
            work[2:2] = [
                ("instructions per new connection, transparent (c=1)", n_new,
                 lambda: curl(new, self.url(f"/small.txt?n=[1-{n_new}]"), self.public_ca, None, True)),
                (f"instructions per new connection, transparent (c={self.options.conc})", n_new,
                 lambda: curl([*new, "--parallel", "--parallel-max", str(self.options.conc)], self.url(f"/small.txt?n=[1-{n_new}]"),
                              self.public_ca, None, True)),
            ]
        if "bulk" in self.options.figures:
            work.append(("instructions per MB relayed (bulk)", (mib << 20) / 1e6,
                         lambda: curl(["-o", "/dev/null"], self.url("/large.bin"), ca, port)))
        for label, units, run in work:
            zero()
            run()
            total = dump(f"figure{len(figures)}")
            figures.append((label, total / units))
            b.log(f"{label}: {total / units:,.0f}")
        return figures

    def run(self):
        o = self.options
        self.check()
        if o.instructions:
            figures = self.instructions()
            print()
            for label, value in figures:
                print(f"{label:55} {value:14,.0f}")
            return
        for run in range(1, o.runs + 1):
            if "new1" in o.figures:
                self.new_connections(run, 1)
            if "new32" in o.figures:
                self.new_connections(run, o.conc)
            if "ka" in o.figures:
                self.keep_alive(run)
        if "idle" in o.figures:
            self.idle()
        if "bulk" in o.figures:
            for run in range(1, o.runs + 1):
                self.bulk(run)
        self.report()

    def report(self):
        rows = [("new connection, c=1: mean latency (ms)", "new1_latency_ms", False),
                ("new connections, c=1 (req/s)", "new1_rps", False),
                ("pinproxy CPU per new connection, c=1 (ms)", "new1_cpu_ms", True),
                (f"new connections, c={self.options.conc} (req/s)", f"new{self.options.conc}_rps", False),
                (f"pinproxy CPU per new connection, c={self.options.conc} (ms)", f"new{self.options.conc}_cpu_ms", True),
                ("keep-alive (req/s)", "ka_rps", False),
                ("pinproxy CPU per keep-alive request (µs)", "ka_cpu_us", True),
                ("bulk (MB/s)", "bulk_MBps", False),
                ("pinproxy CPU per GB relayed (s)", "bulk_cpu_s_per_GB", True),
                ("pinproxy RSS per idle tunnel (KiB)", "idle_kib_per_tunnel", True)]
        transparent = self.options.transparent
        extra = (" transparent | transparent ÷ pinproxy |", "---:|---:|") if transparent else ("", "")
        print(f"\n| figure (median of {self.options.runs}) | direct | pinproxy | pinproxy ÷ direct |{extra[0]}\n|---|---:|---:|---:|{extra[1]}")
        for label, key, proxy_only in rows:
            direct = self.results.get((key, "direct"))
            proxy = self.results.get((key, "pinproxy"))
            if not proxy:
                continue
            p = statistics.median(proxy)
            d = statistics.median(direct) if direct else None
            ratio = f"{p / d:.2f}×" if d else "–"
            line = f"| {label} | {'–' if d is None else f'{d:.3g}'} | {p:.3g} | {ratio} |"
            if transparent:
                t = self.results.get((key, "transparent"))
                line += f" {statistics.median(t):.3g} | {statistics.median(t) / p:.3f}× |" if t else " – | – |"
            print(line)
        if self.answered:
            print("\nnew connections not answered 200: " + ", ".join(f"{name} {lost} of {made}" for name, (made, lost) in self.answered.items()))

    def close(self):
        self.daemon.stop()
        self.origin.stop()
        if not self.options.keep:
            subprocess.run(["rm", "-rf", self.work])


def rotate(items, k):
    k %= len(items)
    return items[k:] + items[:k]


def main():
    parser = b.argument_parser(__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--n-new", type=int, default=500)
    parser.add_argument("--conc", type=int, default=32)
    parser.add_argument("--n-ka", type=int, default=5000)
    parser.add_argument("--bulk-mib", type=int, default=256)
    parser.add_argument("--n-idle", type=int, default=1000)
    parser.add_argument("--origin-key", choices=["rsa2048", "p256"], default="rsa2048")
    parser.add_argument("--figures", default="new1,new32,ka,bulk,idle")
    parser.add_argument("--instructions", action="store_true", help="count instructions under callgrind instead")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--transparent", action="store_true",
                        help="also through the transparent listener (root; runs in a network namespace of its own)")
    options = parser.parse_args()
    if options.transparent and os.environ.get("PINPROXY_BENCH_NETNS") != "1":
        if os.geteuid() != 0:
            raise SystemExit("--transparent needs root (a network namespace, nftables, curl as user nobody)")
        # Again, inside a network namespace of its own: the egress lock never touches the host's ruleset.
        os.execvpe("unshare", ["unshare", "-n", sys.executable, *sys.argv], {**os.environ, "PINPROXY_BENCH_NETNS": "1"})
    if options.transparent:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    options.figures = set(options.figures.split(","))
    if options.instructions:
        options.n_new = min(options.n_new, 200)
        options.n_ka = min(options.n_ka, 2000)
        options.bulk_mib = min(options.bulk_mib, 64)
    # SIGTERM ends the run like Ctrl-C: the daemon and the origin are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    b.require_binary(options.bin)
    bench = Bench(options)
    try:
        bench.run()
    finally:
        bench.close()


if __name__ == "__main__":
    main()
