#!/usr/bin/env python3
"""What `[clients]` costs per new connection: pinproxy's CPU with the client's identity looked up
on every connection, against the same daemon without `[clients]`, all on loopback with
proxy-bench's nginx origin. Not a test: it prints a table and exits 0.

    Benchmarks/client-identity.py [--bin .build/release/pinproxy] [--runs 5] [--n-new 2000] [--conc 32] [--n-single 400]

Three daemons, started once each and measured in turn (interleaved, rotating the order):
  none     no [clients]: nothing is looked up
  clients  sections by uid, user and unit, none of them restricting this client (it matches
           uid:0 when run as root): per connection, whether the peer is this host's and the
           netlink lookup of its socket; the user's name and the unit come from caches after the
           first connection
  exe      clients, plus exe: sections naming curl and this Python: per connection, /proc is read
           for the program holding the socket (off the loop)
Figures:
  c=CONC   pinproxy's CPU (user + system) per new connection: N_NEW connections by curl, CONC at a
           time, each TCP + CONNECT + full TLS 1.3 with the client (pinproxy resumes upstream);
           median of RUNS. The issue's bound: clients at most 5 % above none.
  c=1      pinproxy's CPU for each of N_SINGLE sequential connections to each daemon, in turn (a
           Python client: CONNECT, TLS, one request, close; measured once the daemon has closed
           both sockets), from
           /proc/PID/task/*/schedstat in nanoseconds: median and p99 per daemon. The sum is checked
           against /proc/PID/stat over the whole series (a thread that ends takes its schedstat along).
"""

import os
import shutil
import signal
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as b  # noqa: E402
from connection_cost import ConnectionCost, rotate  # noqa: E402


def sections(exe):
    """Sections that match this client (uid:0 as root) or nobody, and restrict nothing it asks for."""
    text = f"""
[clients."uid:{os.geteuid()}"]
allow = ["localhost"]

[clients."user:nobody"]
allow = []

[clients."unit:pinproxy-bench-backup.service"]
allow = ["backup.example.com"]
"""
    if exe:
        for program in (os.path.realpath(shutil.which("curl")), os.path.realpath(sys.executable)):
            text += f'\n[clients."exe:{program}"]\nallow = ["localhost"]\n'
    return text


class IdentityBench:
    def __init__(self, options):
        self.options = options
        b.raise_open_file_limit()
        self.work = b.work_directory("pinproxy-identity-bench.")
        b.log(f"work directory {self.work}")
        pki = os.path.join(self.work, "pki")
        pin = b.make_pki(pki, "rsa2048")
        self.origin = b.Origin(self.work, pki)
        self.daemons = {}
        for name, extra in (("none", ""), ("clients", sections(False)), ("exe", sections(True))):
            self.daemons[name] = b.Daemon(options.bin, self.work, pki, self.origin, pin, name=f"pinproxy-{name}",
                                          log_path=os.path.join(self.work, f"pinproxy-{name}.log"), extra_tables=extra)
        self.cost = ConnectionCost(self.daemons, self.origin, options.n_new, options.conc)
        self.results = {}  # (figure, daemon) -> [values]

    def check(self):
        self.cost.warm_up()  # and the identity caches
        log = open(self.daemons["exe"].log_path).read()
        if "client_exe=" not in log:
            raise SystemExit("the exe daemon logged no client_exe: its lookups do not work here (run as root)")

    def sequential(self):
        """N_SINGLE rounds of one connection to each daemon (rotating the order), so that every
        daemon meets the same machine load."""
        state = {}
        for name, daemon in self.daemons.items():
            state[name] = {"context": b.client_context(daemon.ca_path), "baseline": b.open_descriptors(daemon.pid),
                           "samples": [], "skipped": 0, "ticks": b.cpu_seconds(daemon.pid)}
        for round_ in range(self.options.n_single):
            for name, daemon in rotate(list(self.daemons.items()), round_):
                s = state[name]
                before, threads_before = b.cpu_nanoseconds(daemon.pid)
                b.open_tunnel(daemon.port, s["context"], self.origin.port).close()
                b.wait_for(lambda: b.open_descriptors(daemon.pid) <= s["baseline"], 10, "pinproxy to close the tunnel")
                after, threads_after = b.cpu_nanoseconds(daemon.pid)
                if threads_after != threads_before:
                    s["skipped"] += 1  # a thread started or ended meanwhile: its share is not all counted
                    continue
                s["samples"].append((after - before) / 1e6)
        for name, daemon in self.daemons.items():
            s = state[name]
            samples = sorted(s["samples"])
            median, p99 = statistics.median(samples), samples[min(len(samples) - 1, int(0.99 * len(samples)))]
            self.results[("single_median", name)] = [median]
            self.results[("single_p99", name)] = [p99]
            ticks = 1000 * (b.cpu_seconds(daemon.pid) - s["ticks"]) / self.options.n_single
            b.log(f"{name} c=1: median {median:.3f} ms, p99 {p99:.3f} ms per connection ({len(samples)} connections, "
                  f"{s['skipped']} skipped while a thread came or went); /proc/PID/stat: {ticks:.3f} ms per connection")

    def run(self):
        self.check()
        for run in range(1, self.options.runs + 1):
            self.cost.concurrent(run, self.results)
        self.sequential()
        self.report()

    def report(self):
        rows = [(self.cost.label(self.options.runs), "concurrent"),
                ("pinproxy CPU per connection, c=1, median (ms)", "single_median"),
                ("pinproxy CPU per connection, c=1, p99 (ms)", "single_p99")]
        print("\n| figure | none | clients | clients ÷ none | exe | exe ÷ none |\n|---|---:|---:|---:|---:|---:|")
        for label, key in rows:
            values = {name: statistics.median(self.results[(key, name)]) for name in self.daemons}
            none = values["none"]
            print(f"| {label} | {none:.3f} | {values['clients']:.3f} | {values['clients'] / none:.3f}× "
                  f"| {values['exe']:.3f} | {values['exe'] / none:.3f}× |")

    def close(self):
        for daemon in self.daemons.values():
            daemon.stop()
        self.origin.stop()
        if not self.options.keep:
            subprocess.run(["rm", "-rf", self.work])


def main():
    parser = b.argument_parser(__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--n-new", type=int, default=2000)
    parser.add_argument("--conc", type=int, default=32)
    parser.add_argument("--n-single", type=int, default=400)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    options = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    b.require_binary(options.bin)
    identity = IdentityBench(options)
    try:
        identity.run()
    finally:
        identity.close()


if __name__ == "__main__":
    main()
