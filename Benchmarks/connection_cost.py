"""The measuring loop of the benchmarks that compare pinproxy daemons differing in one setting,
per new connection (ct-cost.py, client-identity.py): curl through each daemon in turn to
proxy-bench's nginx origin, on loopback, and the daemon's CPU read from /proc around each run.
Not a test: nothing here asserts timings."""

import os
import re
import subprocess
import sys
from importlib import import_module

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as b  # noqa: E402

bench = import_module("proxy-bench")
rotate = bench.rotate


class ConnectionCost:
    """`daemons` (name -> an object with `port`, `ca_path` and `pid`) in front of `origin`; a run
    opens `n_new` new connections, `conc` at a time, through each."""

    def __init__(self, daemons, origin, n_new, conc):
        self.daemons = daemons
        self.origin = origin
        self.n_new = n_new
        self.conc = conc

    def url(self, n):
        """curl's URL for N requests (its [1-N] glob)."""
        return f"https://localhost:{self.origin.port}/small.txt?n=[1-{n}]"

    def warm_up(self):
        """A sanity request through each daemon, then 50 new connections: the minted leaf, the
        upstream session, the daemon's caches and its allocator are in place before measuring."""
        for name, daemon in self.daemons.items():
            out, _ = bench.curl(["-o", "/dev/null", "-w", "%{http_code}"], f"https://localhost:{self.origin.port}/small.txt",
                                daemon.ca_path, daemon.port)
            if out != "200":
                raise SystemExit(f"{name}: sanity request answered {out!r}")
            bench.curl(["--no-sessionid", "-H", "Connection: close", "--parallel", "--parallel-max", "8", "-o", "/dev/null"],
                       self.url(50), daemon.ca_path, daemon.port)

    def label(self, runs):
        return f"pinproxy CPU per new connection, c={self.conc} (ms, median of {runs})"

    def concurrent(self, run, results):
        """Run RUN (the daemons' order rotates with it): through each daemon, N_NEW connections by
        curl, CONC at a time, each TCP + CONNECT + full TLS 1.3 with the client and one request
        (curl never resumes; pinproxy may resume upstream). Appends the daemon's CPU (user +
        system) per connection, in ms, to RESULTS[("concurrent", name)]."""
        args = ["--no-sessionid", "-H", "Connection: close", "-o", "/dev/null", "-w", "%{http_code}\n",
                "--parallel", "--parallel-immediate", "--parallel-max", str(self.conc)]
        for name, daemon in rotate(list(self.daemons.items()), run):
            before = b.cpu_seconds(daemon.pid)
            out, wall = bench.curl(args, self.url(self.n_new), daemon.ca_path, daemon.port)
            cpu = b.cpu_seconds(daemon.pid) - before
            ok = out.split().count("200")
            if ok != self.n_new:
                b.log(f"WARNING {name} c={self.conc}: {ok} of {self.n_new} requests answered 200")
            results.setdefault(("concurrent", name), []).append(1000 * cpu / self.n_new)
            b.log(f"{name} c={self.conc} run {run}: {ok / wall:.0f} req/s, pinproxy CPU {1000 * cpu / self.n_new:.3f} ms/conn")

    def callgrind_wrapper(self, binary, work, name):
        """(wrapper, binary) to start a daemon NAME under callgrind, counting nothing until
        `instructions` switches it on; its dumps go to WORK/callgrind.NAME*."""
        return (("valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={os.path.join(work, f'callgrind.{name}')}"),
                b.valgrind_binary(binary, work))

    def instructions(self, work, results):
        """Through each daemon (started under `callgrind_wrapper`), N_NEW connections, CONC at a
        time, counted from zero: appends the instructions per connection to
        RESULTS[("instructions", name)]. A count moves by well under 1 % between runs, whatever
        else the machine does."""
        for name, daemon in self.daemons.items():
            subprocess.run(["callgrind_control", "-i", "on", str(daemon.pid)], check=True, capture_output=True)
            subprocess.run(["callgrind_control", "-z", str(daemon.pid)], check=True, capture_output=True)
            args = ["--no-sessionid", "-H", "Connection: close", "-o", "/dev/null", "--parallel", "--parallel-max", str(self.conc)]
            bench.curl(args, self.url(self.n_new), daemon.ca_path, daemon.port)
            before = set(os.listdir(work))
            subprocess.run(["callgrind_control", "-d", "measured", str(daemon.pid)], check=True, capture_output=True)

            def totals():
                for entry in set(os.listdir(work)) - before:
                    match = re.search(r"^totals: (\d+)", open(os.path.join(work, entry)).read(), re.M)
                    if entry.startswith(f"callgrind.{name}") and match:
                        return int(match.group(1))
                return None

            b.wait_for(lambda: totals() is not None, 120, f"{name}'s callgrind dump")
            results.setdefault(("instructions", name), []).append(totals() / self.n_new)
            b.log(f"{name} c={self.conc}: {totals() / self.n_new:,.0f} instructions per connection")
