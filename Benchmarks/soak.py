#!/usr/bin/env python3
"""Soak: many connections through one pinproxy daemon, then idle tunnels, while its RSS and open
descriptors are sampled. Not a test: it prints figures and exits 0 (1 if the descriptor count does
not come back to its idle value, or if a connection ended in a way its kind does not allow).

    Benchmarks/soak.py                               # 1,000,000 connections, concurrency 64
    SOAK_CONNECTIONS=20000 Benchmarks/soak.py        # a quick run
    Benchmarks/soak.py --connections 5000 --kinds vanish-relay --idle-tunnels 0   # one kind alone
    Benchmarks/soak.py --connections N --concurrency C --idle-tunnels 8000 --idle-rounds 2 --bin PATH

Connection kinds, in a fixed rotation (each expects one outcome):
  allowed            CONNECT, TLS through pinproxy, GET /small.txt: 200
  refused-pin        CONNECT to the origin that presents another key: 403 pin-mismatch
  refused-policy     CONNECT denied.test:443: 403 host-denied
  bad-request        a request line that is not HTTP: 400
  vanish-request     half a CONNECT, then the client closes
  vanish-handshake   CONNECT answered 200, the ClientHello sent, then the client closes (reset)
  vanish-relay       a 4 MiB download started, the client resets the connection after 64 KiB
  upstream-vanish    the origin closes the connection after the request, without an answer
Then IDLE_TUNNELS tunnels (CONNECT, TLS, one request) are opened, held, checked and closed, twice.
RSS and descriptors: sampled every second; the growth after warm-up (the first 10 % of the
connections) and the descriptor count after each phase against the idle value are reported.
All traffic stays on 127.0.0.1.
"""

import itertools
import os
import signal
import socket
import ssl
import statistics
import struct
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as b  # noqa: E402

KINDS = ["allowed", "refused-pin", "allowed", "refused-policy", "allowed", "bad-request", "allowed",
         "vanish-request", "allowed", "vanish-handshake", "allowed", "vanish-relay", "allowed", "upstream-vanish"]


def reset(sock):
    """Closes with a RST (SO_LINGER 0): a client or peer that vanishes."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class Soak:
    def __init__(self, options):
        self.options = options
        b.raise_open_file_limit()
        self.work = b.work_directory("pinproxy-soak.")
        b.log(f"work directory {self.work}")
        pki = os.path.join(self.work, "pki")
        pin = b.make_pki(pki, "p256")
        self.origin = b.Origin(self.work, pki, large_mib=4, workers=2)
        self.daemon = b.Daemon(options.bin, self.work, pki, self.origin, pin, log_path=options.log,
                               extra_proxy="idle_timeout = 600\n")
        self.context = b.client_context(self.daemon.ca_path)
        self.kinds = options.kinds.split(",") if options.kinds else KINDS
        self.counts = {}
        self.unexpected = {}
        self.lock = threading.Lock()
        self.done = 0
        self.samples = []  # (seconds, connections done, RSS KiB, descriptors)
        self.sampling = True

    # ------------------------------------------------------------ connection kinds

    def one(self, index):
        kind = self.kinds[index % len(self.kinds)]
        port = self.daemon.port
        try:
            getattr(self, "kind_" + kind.replace("-", "_"))(port)
            outcome = None
        except Exception as error:  # noqa: BLE001 - every failure is counted and reported
            outcome = f"{type(error).__name__}: {error}"[:160]
        with self.lock:
            self.done += 1
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if outcome:
                self.unexpected.setdefault((kind, outcome), 0)
                self.unexpected[(kind, outcome)] += 1

    def kind_allowed(self, port):
        b.open_tunnel(port, self.context, self.origin.port).close()

    def expect_refusal(self, port, host, target_port, status):
        sock, answered = b.connect_request(port, host, target_port)
        sock.close()
        if answered != status:
            raise ConnectionError(f"CONNECT {host}:{target_port} answered {answered}, expected {status}")

    def kind_refused_pin(self, port):
        self.expect_refusal(port, "localhost", self.origin.altkey_port, 403)

    def kind_refused_policy(self, port):
        self.expect_refusal(port, "denied.test", 443, 403)

    def kind_bad_request(self, port):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(b"HELLO THERE\r\n\r\n")
            status, _, _ = b.read_head(sock)
            if status != 400:
                raise ConnectionError(f"answered {status}, expected 400")

    def kind_vanish_request(self, port):
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.sendall(b"CONNECT localhost:%d HTTP/1.1\r\nHo" % self.origin.port)
        reset(sock)

    def kind_vanish_handshake(self, port):
        sock, status = b.connect_request(port, "localhost", self.origin.port)
        if status != 200:
            sock.close()
            raise ConnectionError(f"CONNECT answered {status}")
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        handshake = self.context.wrap_bio(incoming, outgoing, server_hostname="localhost")
        try:
            handshake.do_handshake()
        except ssl.SSLWantReadError:
            pass
        sock.sendall(outgoing.read())
        sock.recv(1)  # the server has started answering
        reset(sock)

    def kind_vanish_relay(self, port):
        tls = b.open_tunnel(port, self.context, self.origin.port)
        tls.sendall(b"GET /large.bin HTTP/1.1\r\nHost: localhost\r\n\r\n")
        received = 0
        while received < 65536:
            chunk = tls.recv(65536)
            if not chunk:
                raise ConnectionError("closed early")
            received += len(chunk)
        reset(tls)

    def kind_upstream_vanish(self, port):
        tls = b.open_tunnel(port, self.context, self.origin.port)
        tls.sendall(b"GET /cut HTTP/1.1\r\nHost: localhost\r\n\r\n")
        try:
            if tls.recv(1024):
                raise ConnectionError("the origin answered /cut")
        except ssl.SSLError:
            pass  # an EOF without close_notify, passed on as such
        tls.close()

    # ------------------------------------------------------------ sampling

    def sample_forever(self, started):
        pid = self.daemon.pid
        while self.sampling:
            try:
                self.samples.append((time.monotonic() - started, self.done, b.rss_kib(pid), b.open_descriptors(pid)))
            except OSError:
                return
            time.sleep(1)

    def settle_descriptors(self, idle, seconds=60):
        """Waits (bounded) for the descriptor count to come back to `idle`; returns the last count."""
        deadline = time.monotonic() + seconds
        count = b.open_descriptors(self.daemon.pid)
        while count != idle and time.monotonic() < deadline:
            time.sleep(0.2)
            count = b.open_descriptors(self.daemon.pid)
        return count

    # ------------------------------------------------------------ phases

    def connections(self):
        o = self.options
        pid = self.daemon.pid
        # One of each kind first: a broken setup shows at once, not after an hour.
        for index in range(len(self.kinds)):
            self.one(index)
        if self.unexpected:
            raise SystemExit(f"first round failed: {self.unexpected}")
        time.sleep(1)
        self.idle_descriptors = self.settle_descriptors(b.open_descriptors(pid), 5)
        self.idle_rss = b.rss_kib(pid)
        b.log(f"idle: RSS {self.idle_rss} KiB, {self.idle_descriptors} descriptors; {o.connections} connections at concurrency {o.concurrency}")
        started = time.monotonic()
        sampler = threading.Thread(target=self.sample_forever, args=(started,), daemon=True)
        sampler.start()
        counter = itertools.count(len(self.kinds))
        total = o.connections
        last_report = [time.monotonic()]

        def worker():
            while True:
                index = next(counter)
                if index >= total:
                    return
                self.one(index)
                now = time.monotonic()
                if now - last_report[0] >= 30:
                    last_report[0] = now
                    s = self.samples[-1] if self.samples else (0, 0, 0, 0)
                    b.log(f"  {self.done} connections, {self.done / (now - started):.0f}/s, RSS {s[2]} KiB, {s[3]} descriptors, "
                          f"{sum(self.unexpected.values())} unexpected")

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(o.concurrency)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        self.sampling = False
        sampler.join()
        after = self.settle_descriptors(self.idle_descriptors)
        time.sleep(1)
        self.report_connections(elapsed, after)
        return after == self.idle_descriptors

    def report_connections(self, elapsed, after):
        o = self.options
        warm = [s for s in self.samples if s[1] >= o.connections * 0.1]
        print(f"\n## {self.done} connections at concurrency {o.concurrency} in {elapsed:.0f} s ({self.done / elapsed:.0f}/s)")
        print("| kind | connections |\n|---|---:|")
        for kind in dict.fromkeys(self.kinds):
            print(f"| {kind} | {self.counts.get(kind, 0)} |")
        unexpected = sum(self.unexpected.values())
        print(f"\nunexpected endings: {unexpected}")
        for (kind, what), count in sorted(self.unexpected.items(), key=lambda item: -item[1])[:10]:
            print(f"  {count} × {kind}: {what}")
        if warm:
            rss = [s[2] for s in warm]
            fds = [s[3] for s in warm]
            first, last = warm[0], warm[-1]
            per_100k = (last[2] - first[2]) / max(1, last[1] - first[1]) * 100_000
            print(f"RSS: idle {self.idle_rss} KiB; after warm-up {first[2]} KiB; then min {min(rss)}, median {statistics.median(rss):.0f}, "
                  f"max {max(rss)} KiB; at the end {last[2]} KiB (growth after warm-up {last[2] - first[2]:+d} KiB, "
                  f"{per_100k:+.0f} KiB per 100,000 connections)")
            print(f"descriptors: idle {self.idle_descriptors}; under load median {statistics.median(fds):.0f}, max {max(fds)}; "
                  f"after the run {after} ({'back to idle' if after == self.idle_descriptors else 'NOT back to idle'})")
        print(f"final RSS {b.rss_kib(self.daemon.pid)} KiB")
        self.unexpected_connections = unexpected

    def idle_tunnels(self):
        o = self.options
        pid = self.daemon.pid
        ok = True
        print(f"\n## {o.idle_tunnels} idle tunnels, {o.idle_rounds} rounds")
        for round_number in range(1, o.idle_rounds + 1):
            rss0 = b.rss_kib(pid)
            started = time.monotonic()
            with ThreadPoolExecutor(o.concurrency) as pool:
                results = list(pool.map(self.try_tunnel, range(o.idle_tunnels)))
            tunnels = [t for t in results if not isinstance(t, str)]
            failures = [t for t in results if isinstance(t, str)]
            opened = time.monotonic() - started
            time.sleep(2)
            held_rss, held_fds = b.rss_kib(pid), b.open_descriptors(pid)
            # Every tunnel still works: one more request on each.
            with ThreadPoolExecutor(o.concurrency) as pool:
                alive = sum(pool.map(self.still_alive, tunnels))
            for tunnel in tunnels:
                tunnel.close()
            after = self.settle_descriptors(self.idle_descriptors)
            time.sleep(1)
            rss1 = b.rss_kib(pid)
            ok &= after == self.idle_descriptors and not failures and alive == len(tunnels)
            print(f"round {round_number}: {len(tunnels)} opened in {opened:.0f} s ({len(failures)} failed"
                  f"{': ' + failures[0] if failures else ''}), {alive} answered again; held: RSS {held_rss} KiB "
                  f"({(held_rss - rss0) / max(1, len(tunnels)):.1f} KiB per tunnel), {held_fds} descriptors; "
                  f"after closing: {after} descriptors ({'back to idle' if after == self.idle_descriptors else 'NOT back to idle'}), RSS {rss1} KiB")
        return ok

    def try_tunnel(self, _):
        try:
            return b.open_tunnel(self.daemon.port, self.context, self.origin.port, timeout=120)
        except Exception as error:  # noqa: BLE001
            return f"{type(error).__name__}: {error}"

    @staticmethod
    def still_alive(tunnel):
        try:
            tunnel.sendall(b"GET /small.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
            return b.read_response(tunnel)[0] == 200
        except Exception:  # noqa: BLE001
            return False

    def close(self):
        self.daemon.stop()
        self.origin.stop()
        if not self.options.keep:
            import shutil
            shutil.rmtree(self.work, ignore_errors=True)


def main():
    parser = b.argument_parser(__doc__)
    parser.add_argument("--connections", type=int, default=int(os.environ.get("SOAK_CONNECTIONS", 1_000_000)))
    parser.add_argument("--concurrency", type=int, default=int(os.environ.get("SOAK_CONCURRENCY", 64)))
    parser.add_argument("--idle-tunnels", type=int, default=int(os.environ.get("SOAK_IDLE_TUNNELS", 8000)))
    parser.add_argument("--idle-rounds", type=int, default=2)
    parser.add_argument("--kinds", help="only these connection kinds, comma-separated (to find which one grows memory)")
    parser.add_argument("--log", default=os.devnull, help="pinproxy's log (default: discarded)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    options = parser.parse_args()
    # SIGTERM ends the run like Ctrl-C: the daemon and the origin are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    b.require_binary(options.bin)
    soak = Soak(options)
    try:
        descriptors_ok = soak.connections()
        idle_ok = soak.idle_tunnels() if options.idle_tunnels else True
    finally:
        soak.close()
    ok = descriptors_ok and idle_ok and soak.unexpected_connections == 0
    print("\nsoak: " + ("descriptors back to idle after every phase, no unexpected ending" if ok else "FAILED (see above)"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
