"""Without --config, every command that reads a config reads the installed one
(/etc/pinproxy/pinproxy.toml) when it exists, else the built-in default, and says which; `--config -`
is always the built-in default.

The tests never touch /etc: PINPROXY_DEFAULT_CONFIG (for tests and packagers) names the installed
config instead, as conftest.py does for every other test (with a path where no file exists).
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

import origin as originlib
from conftest import TIMEOUT, Workspace
from proxy_harness import API, clean_env, free_port, poll, port_accepts

VARIABLE = "PINPROXY_DEFAULT_CONFIG"


def run(ws: Workspace, installed, *args, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    """`pinproxy ARGS` with INSTALLED as the installed config."""
    return subprocess.run([str(ws.bin), *map(str, args)], cwd=ws.cwd, env=clean_env(**{VARIABLE: str(installed)}),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def installed(ws) -> os.PathLike:
    """An installed config that differs from the built-in default in every way a command shows."""
    return ws.config(f"""
        [proxy]
        listen = ["127.0.0.1:{free_port()}"]
        ca_dir = "ca"
        pid_file = "pinproxy.pid"
        allow_ports = [443]
        block_private_destinations = false

        [resolve]
        "{API}" = "127.0.0.1"

        [hosts."{API}"]
        action = "deny"
        """, name="installed.toml")


def test_check_reads_the_installed_config_and_says_so(ws, installed):
    r = run(ws, installed, "check")
    assert r.returncode == 0, r
    assert r.stdout.startswith(f"{installed}: ok\n"), r
    assert f"no --config given: reading {installed}" in r.stderr, r
    assert "1 entry" in r.stdout, r


def test_config_dash_is_the_built_in_default(ws, installed):
    r = run(ws, installed, "check", "--config", "-")
    assert r.returncode == 0 and r.stdout.startswith("<embedded>: ok\n"), r
    assert r.stderr == "", r  # --config was given: nothing to announce


def test_without_an_installed_config_the_built_in_default(ws):
    missing = ws.path("nowhere/pinproxy.toml")
    r = run(ws, missing, "check")
    assert r.returncode == 0 and r.stdout.startswith("<embedded>: ok\n"), r
    assert f"no --config given and no {missing}: using the built-in default config" in r.stderr, r


def test_a_broken_installed_config_is_reported_with_its_path(ws):
    broken = ws.config('[hosts."api.test"]\npinz = ["x"]\n', name="broken.toml")
    r = run(ws, broken, "check")
    assert r.returncode == 1, r
    assert f'{broken}:2: unknown key hosts."api.test".pinz (did you mean "pins"?)' in r.stderr, r


def test_evaluate_reads_it(ws, installed):
    r = run(ws, installed, "evaluate", "--host", API, "--chain", ws.path("api-chain.pem"))
    assert r.returncode == 1 and r.stdout.startswith("refuse: host-denied"), r
    assert f"reading {installed}" in r.stderr, r
    builtin = run(ws, installed, "evaluate", "--config", "-", "--host", API, "--chain", ws.path("api-chain.pem"))
    assert builtin.stdout.startswith("refuse: untrusted-chain"), builtin  # the system store knows no test CA


def test_ca_reads_it(ws, installed):
    r = run(ws, installed, "ca")
    assert r.returncode == 0, r
    assert r.stdout.splitlines()[0] == str(ws.path("ca/ca.pem")), r
    assert f"reading {installed}" in r.stderr, r


def test_reload_reads_it(ws, installed):
    r = run(ws, installed, "reload")
    assert r.returncode == 1, r
    assert f"cannot read a process id from {ws.path('pinproxy.pid')}" in r.stderr, r


@pytest.fixture
def origin(pki):
    o = originlib.TLSOrigin(pki.path("api-chain.pem"), pki.path("api.key"), name="installed-config")
    yield o
    o.close()


def test_diagnose_and_pin_dial_through_its_resolve(ws, installed, origin):
    # api.test resolves nowhere but through the installed config's [resolve].
    d = run(ws, installed, "diagnose", f"{API}:{origin.port}", timeout=120)
    assert f"connecting to 127.0.0.1:{origin.port}, SNI {API}" in d.stdout, d
    assert re.search(rf'^policy: entry hosts."{API}" \(line \d+\) of {re.escape(str(installed))}$', d.stdout, re.M), d
    assert "verdict: refuse: host-denied" in d.stdout, d
    p = run(ws, installed, "pin", "--connect", f"{API}:{origin.port}")
    assert p.returncode == 0, p
    assert ws.pki.spki("api") in p.stdout and f"reading {installed}" in p.stderr, p


def test_run_reads_it(ws, installed):
    port = int(re.search(r"127\.0\.0\.1:(\d+)", installed.read_text()).group(1))
    log = ws.path("run.log")
    with open(log, "wb") as err:
        daemon = subprocess.Popen([str(ws.bin), "run"], cwd=ws.cwd, env=clean_env(**{VARIABLE: str(installed)}),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    try:
        poll(lambda: daemon.poll() is None and port_accepts(port) and "event=started" in log.read_text(),
             what=f"the daemon on port {port}")
        started = [line for line in log.read_text().splitlines() if "event=started" in line]
        assert f"config={installed}" in started[0], log.read_text()
    finally:
        daemon.terminate()
        assert daemon.wait(TIMEOUT) == 0, log.read_text()
