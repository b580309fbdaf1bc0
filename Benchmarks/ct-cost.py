#!/usr/bin/env python3
"""What Certificate Transparency costs per new connection: pinproxy's CPU with `ct = "enforce"`
against the same daemon with `ct = "off"`, interleaved, all on loopback with proxy-bench's nginx
origin. Not a test: it prints a table and exits 0.

    Benchmarks/ct-cost.py [--bin .build/release/pinproxy] [--runs 5] [--n-new 2000] [--conc 32] [--cold 200]
    Benchmarks/ct-cost.py --instructions [--n-new 500]   # the c=CONC work under callgrind instead

The origin serves a leaf of our own CA with two embedded SCTs of test logs (Tests/e2e/ct_pki.py);
the CA is the daemons' "system store" (SSL_CERT_FILE), and the log list names the logs.
Figures:
  c=CONC  pinproxy's CPU (user + system) per new connection: N_NEW connections by curl, CONC at a
          time, each TCP + CONNECT + full TLS 1.3 with the client; pinproxy resumes upstream (the
          enforce daemon asks for the SCT extension and a staple too), and the CT answer is kept
          with the verified chain; median of RUNS. The issue's bound: enforce within 10 % of off.
  cold    the SCT signature checks themselves: `pinproxy evaluate` of the chain COLD times under
          each config (a fresh process each time, so nothing is kept): CPU per run.
With --instructions, both daemons run under callgrind and the one figure is their instructions
per new connection (N_NEW at c=CONC, once): the figure to compare on a loaded machine.
"""

import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "Tests", "e2e"))
import benchlib as b  # noqa: E402
from connection_cost import ConnectionCost, rotate  # noqa: E402
import ct_pki  # noqa: E402
import pki as pkilib  # noqa: E402


def make_pki(directory):
    """Root (the system store), intermediate, and a localhost leaf with two embedded SCTs."""
    os.makedirs(directory, exist_ok=True)
    root = pkilib.make_root("pinproxy ct bench root")
    inter = pkilib.make_intermediate("pinproxy ct bench intermediate", root)
    logs = [ct_pki.Log("bench A", "Operator A"), ct_pki.Log("bench B", "Operator B")]
    leaf = ct_pki.issue_leaf(inter, "localhost", [ct_pki.SCTSpec(log) for log in logs])
    for stem in ("origin", "altkey"):
        with open(os.path.join(directory, f"{stem}.pem"), "wb") as f:
            f.write(leaf.pem + inter.pem)
        with open(os.path.join(directory, f"{stem}.key"), "wb") as f:
            f.write(pkilib.key_pem(leaf.key))
    with open(os.path.join(directory, "root.pem"), "wb") as f:
        f.write(root.pem)
    with open(os.path.join(directory, "ct-log-list.json"), "w") as f:
        f.write(ct_pki.log_list(logs))


class Daemon:
    def __init__(self, binary, work, pki, origin, ct, wrapper=()):
        self.name = ct
        self.port = b.free_port()
        self.directory = os.path.join(work, f"pinproxy-{ct}")
        os.makedirs(self.directory, exist_ok=True)
        self.config = os.path.join(self.directory, "pinproxy.toml")
        with open(self.config, "w") as f:
            f.write(f"""[proxy]
listen = ["127.0.0.1:{self.port}"]
ca_dir = "{self.directory}/ca"
block_private_destinations = false
allow_ports = [{origin.port}]
ct_log_list = "{pki}/ct-log-list.json"

[resolve]
"localhost" = "127.0.0.1"

[default]
trust = "system"
ct = "{ct}"
""")
        self.env = {**os.environ, "SSL_CERT_FILE": os.path.join(pki, "root.pem"), "SSL_CERT_DIR": "/nonexistent"}
        ca = subprocess.run([binary, "ca", "--config", self.config], check=True, capture_output=True, text=True, env=self.env).stdout
        self.ca_path = ca.splitlines()[0]
        self.log_path = os.path.join(work, f"pinproxy-{ct}.log")
        self.process = subprocess.Popen([*wrapper, binary, "run", "--config", self.config], stdout=subprocess.DEVNULL,
                                        stderr=open(self.log_path, "w"), start_new_session=True, env=self.env)
        self.pid = self.process.pid
        b.wait_for(lambda: self.process.poll() is None and b.port_open(self.port), 600 if wrapper else 60, "pinproxy to listen")

    def stop(self):
        b.stop_process(self.process)


class CTBench:
    def __init__(self, options):
        self.options = options
        b.raise_open_file_limit()
        self.work = b.work_directory("pinproxy-ct-bench.")
        b.log(f"work directory {self.work}")
        self.pki = os.path.join(self.work, "pki")
        make_pki(self.pki)
        self.origin = b.Origin(self.work, self.pki)
        self.daemons = {}
        self.cost = ConnectionCost(self.daemons, self.origin, options.n_new, options.conc)
        for ct in ("off", "enforce"):
            wrapper, binary = self.cost.callgrind_wrapper(options.bin, self.work, ct) if options.instructions else ((), options.bin)
            self.daemons[ct] = Daemon(binary, self.work, self.pki, self.origin, ct, wrapper)
        self.results = {}

    def check(self):
        self.cost.warm_up()
        if "ct=compliant" not in open(self.daemons["enforce"].log_path).read():
            raise SystemExit("the enforce daemon logged no ct=compliant: CT is not applied")

    def cold(self):
        chain = os.path.join(self.pki, "origin.pem")
        for round_ in range(self.options.cold):
            for name, daemon in rotate(list(self.daemons.items()), round_):
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                subprocess.run([self.options.bin, "evaluate", "--config", daemon.config, "--host", "localhost", "--port", str(self.origin.port), "--chain", chain],
                               check=True, stdout=subprocess.DEVNULL, env=daemon.env)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                self.results.setdefault(("cold", name), []).append(1000 * cpu)

    def run(self):
        self.check()
        if self.options.instructions:
            self.cost.instructions(self.work, self.results)
            rows = [(f"instructions per new connection, c={self.options.conc} (callgrind, {self.options.n_new} connections)", "instructions")]
        else:
            for run in range(1, self.options.runs + 1):
                self.cost.concurrent(run, self.results)
            if self.options.cold:
                self.cold()
            rows = [(self.cost.label(self.options.runs), "concurrent")]
        if self.options.cold and not self.options.instructions:
            rows.append((f"`pinproxy evaluate` CPU per run, nothing kept (ms, median of {self.options.cold})", "cold"))
        print("\n| figure | off | enforce | enforce ÷ off |\n|---|---:|---:|---:|")
        for label, key in rows:
            off, enforce = (statistics.median(self.results[(key, name)]) for name in ("off", "enforce"))
            shown = "{:,.0f}" if key == "instructions" else "{:.3f}"
            print(f"| {label} | {shown.format(off)} | {shown.format(enforce)} | {enforce / off:.3f}× |")

    def close(self):
        for daemon in self.daemons.values():
            daemon.stop()
        self.origin.stop()
        if not self.options.keep:
            shutil.rmtree(self.work, ignore_errors=True)


def main():
    parser = b.argument_parser(__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--n-new", type=int, default=2000)
    parser.add_argument("--conc", type=int, default=32)
    parser.add_argument("--cold", type=int, default=200)
    parser.add_argument("--instructions", action="store_true", help="count instructions under callgrind instead")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    options = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    b.require_binary(options.bin)
    ct = CTBench(options)
    try:
        ct.run()
    finally:
        ct.close()


if __name__ == "__main__":
    main()
