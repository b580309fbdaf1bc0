"""`pinproxy run` under an open-file limit too low to start: a clean refusal, never a trap.

Each worker's event loop, resolver and listeners take descriptors as the daemon starts. The
limit (soft and hard, so the daemon cannot raise it) is swept from a handful of descriptors to
enough for every worker: at each, the daemon either starts (and stops on SIGTERM) or exits with
status 1 and a line saying why. Before, a loop that libevent could not make (`event_base_new`,
out of descriptors for epoll) was a `fatalError`: the process trapped.
"""

from __future__ import annotations

import os
import signal
import subprocess

from proxy_harness import TIMEOUT, clean_env, make_proxy, poll  # noqa: F401

WORKERS = 2
LIMITS = range(8, 12 + 8 * WORKERS)


def environment() -> dict[str, str]:
    """Under AddressSanitizer, leak checking is off for these runs: with a handful of descriptors
    LeakSanitizer cannot start its symbolizer, and its suppressions (scripts/sanitizers/lsan.supp:
    TOMLKit's known leaks) match symbolized frames only. Every other daemon of the suite keeps
    it on, on the same start paths."""
    env = clean_env()
    if os.environ.get("PINPROXY_SANITIZER") == "address":
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    return env


def test_every_descriptor_limit_is_a_clean_start_or_a_clean_refusal(make_proxy):
    p = make_proxy(start=False, proxy={"workers": WORKERS, "allow_ports": [443]})
    outcomes: dict[int, str] = {}
    for limit in LIMITS:
        log = p.dir / f"stderr-{limit}.log"
        with open(log, "wb") as err:
            proc = subprocess.Popen(["prlimit", f"--nofile={limit}:{limit}", "--", *p.argv()], cwd=p.dir,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=environment())
        try:
            # Listening is logged once every worker is up (a port accepts as soon as the first is).
            poll(lambda: proc.poll() is not None or "event=listening" in log.read_text(), TIMEOUT,
                 what=f"a start or an exit at {limit}")
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(TIMEOUT) == 0, log.read_text()
                outcomes[limit] = "started"
                continue
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(TIMEOUT)
        text = log.read_text()
        assert proc.returncode == 1, f"exit {proc.returncode} with {limit} descriptors:\n{text}"
        assert "Fatal error" not in text and "level=error" in text, f"{limit} descriptors:\n{text}"
        outcomes[limit] = text.strip().splitlines()[-1]
    failures = [line for line in outcomes.values() if line != "started"]
    assert any("event_base_new: Too many open files" in line for line in failures), "\n".join(failures)
    assert "started" in outcomes.values(), f"no limit up to {LIMITS[-1]} was enough to start:\n" + "\n".join(failures)
