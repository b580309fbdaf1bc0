"""`pinproxy check` judges a config against this host too: what the daemon's start, a reload or
`egress apply` would refuse here fails it with FILE:LINE, and what this host makes of it is a
warning that names the host's state (issue 33):

- with `transparent_listen` set, `capture.exempt_users` naming no user here is an error (egress
  apply refuses it); the default `["pinproxy"]` never fails a config that does not capture;
- `transparent_listen` against this host's IPv6: a `[::1]` listener is needed where `::1` can be
  bound, the IPv4 one alone where it cannot (checked in a fresh network namespace whose `lo` has
  IPv6 disabled, never on the host);
- `trust = "system"` on a host whose system store is missing or empty;
- `check --as USER` reads every file as that user (a child under a uid switch; here systemd does
  not run, so the unit's path restrictions are not applied, and the output says so).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import netns
from conftest import run


def check(pinproxy, cfg: Path, *args, env=None, argv_prefix=()):
    return subprocess.run([*argv_prefix, str(pinproxy), "check", "--config", str(cfg), *args], capture_output=True,
                          text=True, timeout=60, env=env)


def test_a_misspelt_exempt_user_fails_check_at_its_line(pinproxy, tmp_path):
    cfg = tmp_path / "pinproxy.toml"
    cfg.write_text('[proxy]\ntransparent_listen = ["127.0.0.1:3129", "[::1]:3129"]\n\n'
                   '[capture]\nexempt_users = ["pinprxy"]\n')
    r = check(pinproxy, cfg)
    assert r.returncode == 1, r
    assert f'{cfg}:5: capture.exempt_users: there is no user "pinprxy" on this host' in r.stderr, r
    assert "egress apply` refuses this config" in r.stderr and "the config is rejected" in r.stderr, r
    # `egress print` refuses the same config: check now says what it says.
    printed = run(pinproxy, "egress", "print", "--config", cfg)
    assert printed.code != 0 and "pinprxy" in printed.err, printed


def test_the_default_exempt_user_fails_only_configs_that_capture(pinproxy, tmp_path):
    if subprocess.run(["getent", "passwd", "pinproxy"], capture_output=True).returncode == 0:
        pytest.skip("this host has a user pinproxy")
    plain = tmp_path / "plain.toml"
    plain.write_text('[proxy]\nlisten = ["127.0.0.1:3128"]\n')
    r = check(pinproxy, plain)
    assert r.returncode == 0 and "exempt_users" not in r.stdout + r.stderr, r
    capturing = tmp_path / "capturing.toml"
    capturing.write_text('[proxy]\ntransparent_listen = ["127.0.0.1:3129", "[::1]:3129"]\n')
    r = check(pinproxy, capturing)
    assert r.returncode == 1 and f'{capturing}:2: capture.exempt_users: there is no user "pinproxy"' in r.stderr, r


def _ipv6_state(pinproxy, text: str, disable_ipv6: bool, tmp_path: Path):
    cfg = tmp_path / "pinproxy.toml"
    cfg.write_text(text)
    with netns.NetNS() as ns:
        if disable_ipv6:
            ns.check("sysctl", "-q", "-w", "net.ipv6.conf.lo.disable_ipv6=1")
        return ns.run(str(pinproxy), "check", "--config", str(cfg))


CAPTURE_BOTH = '[proxy]\ntransparent_listen = ["127.0.0.1:3129", "[::1]:3129"]\n\n[capture]\nexempt_users = ["root"]\n'
CAPTURE_V4 = '[proxy]\ntransparent_listen = ["127.0.0.1:3129"]\n\n[capture]\nexempt_users = ["root"]\n'


@pytest.mark.skipif(netns.unavailable() is not None, reason=netns.unavailable() or "")
def test_transparent_listen_against_this_hosts_ipv6(pinproxy, tmp_path):
    # IPv6 on: both listeners pass; the IPv4 one alone is a warning at its line.
    r = _ipv6_state(pinproxy, CAPTURE_BOTH, False, tmp_path)
    assert r.returncode == 0 and "warnings: 0" in r.stdout, r
    r = _ipv6_state(pinproxy, CAPTURE_V4, False, tmp_path)
    assert r.returncode == 0 and "warnings: 1" in r.stdout, r
    assert ":2: warning: proxy.transparent_listen has no [::1] listener, but this host can bind [::1]" in r.stdout, r
    # IPv6 off on lo: the [::1] listener is the warning, and the IPv4 one alone passes.
    r = _ipv6_state(pinproxy, CAPTURE_BOTH, True, tmp_path)
    assert r.returncode == 0 and "warnings: 1" in r.stdout, r
    assert ":2: warning: proxy.transparent_listen has a [::1] listener, but this host cannot bind [::1]" in r.stdout, r
    r = _ipv6_state(pinproxy, CAPTURE_V4, True, tmp_path)
    assert r.returncode == 0 and "warnings: 0" in r.stdout, r


def test_trust_system_without_a_system_store_is_a_warning(pinproxy, tmp_path):
    cfg = tmp_path / "pinproxy.toml"
    cfg.write_text('[default]\ntrust = "system"\n\n[hosts."api.test"]\ntrust = ["system", "root-a.pem"]\n')
    _root_a(tmp_path).rename(tmp_path / "root-a.pem")
    missing = {**os.environ, "SSL_CERT_FILE": str(tmp_path / "no-bundle.crt"), "SSL_CERT_DIR": str(tmp_path / "no-dir")}
    r = check(pinproxy, cfg, env=missing)
    assert r.returncode == 0 and "warnings: 1" in r.stdout, r
    assert (f"{cfg}:1: warning: default and 1 more entry: trust uses the system trust store, but this host has none "
            f"(there is no {tmp_path / 'no-dir'})") in r.stdout, r
    (tmp_path / "empty-dir").mkdir()
    r = check(pinproxy, cfg, env={**missing, "SSL_CERT_DIR": str(tmp_path / "empty-dir")})
    assert r.returncode == 0 and f"({tmp_path / 'empty-dir'} holds no certificate)" in r.stdout, r
    # The host's own store (scripts/setup installs ca-certificates): no warning.
    assert "warnings: 0" in check(pinproxy, cfg).stdout


def _root_a(tmp_path: Path) -> Path:
    import pki as pkilib
    root = pkilib.make_root("check root")
    return pkilib.write_pem(tmp_path / "made-root.pem", root.cert)


@pytest.fixture
def world_readable_dir():
    """A directory user nobody can reach (pytest's own are 0700 under root)."""
    directory = Path(tempfile.mkdtemp(prefix="pinproxy-check-as-", dir="/tmp"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory)


@pytest.mark.skipif(os.geteuid() != 0, reason="check --as switches user: root only")
def test_check_as_the_service_user_reads_files_as_it_would(pinproxy, world_readable_dir):
    """An anchor readable by root alone passes `check` as root and fails `check --as nobody` at
    its line, as the service running as its own user would fail at start or reload."""
    cfg = world_readable_dir / "pinproxy.toml"
    cfg.write_text('[hosts."api.test"]\ntrust = ["private-root.pem"]\n')
    cfg.chmod(0o644)
    anchor = _root_a(world_readable_dir)
    anchor.rename(world_readable_dir / "private-root.pem")
    (world_readable_dir / "private-root.pem").chmod(0o600)
    assert check(pinproxy, cfg).returncode == 0
    r = check(pinproxy, cfg, "--as", "nobody")
    assert r.returncode == 1, r
    assert "as user nobody (uid 65534" in r.stderr, r
    assert "systemd does not run here, so the unit's path restrictions" in r.stderr, r
    assert f"{cfg}:2:" in r.stderr and "private-root.pem" in r.stderr, r
    (world_readable_dir / "private-root.pem").chmod(0o644)
    ok = check(pinproxy, cfg, "--as", "nobody")
    assert ok.returncode == 0 and f"{cfg}: ok" in ok.stdout, ok
    assert check(pinproxy, cfg, "--as", "no-such-user-here").returncode == 2
