"""`pinproxy run` and `pinproxy ca`: a CA directory or key others control is refused.

Whoever can read the CA key can impersonate every host to the clients that trust the CA, and
whoever owns the directory can read or replace the key. The daemon refuses to start, with a
message saying how to fix it, when:
- ca_dir belongs to another user;
- ca.key belongs to another user;
- ca.key may be read or written by group or others.
A directory of its own with a loose mode is made 0700, and the daemon starts.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from proxy_harness import TIMEOUT, free_port, make_proxy, pinned_entry  # noqa: F401 (fixture)
from proxy_harness import API

OTHER_UID = 65534  # nobody


def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("giving files to another user needs root", pytrace=False)


def start_failure(make_proxy, pki, ca_dir) -> str:
    """Starts a daemon on CA_DIR, expects exit 1; returns its start-failed error."""
    p = make_proxy(start=False, proxy={"ca_dir": str(ca_dir), "allow_ports": [443]}, hosts={API: pinned_entry(pki, "api", "int-a")})
    p.start(wait=False)
    assert p.wait_exit(TIMEOUT) == 1, p.describe()
    p._stopped = True  # the exit is what the test expects
    failed = [l for l in p.logs() if l.get("event") == "start-failed"]
    assert failed, p.describe()
    return failed[-1].get("error", "")


def made_ca(make_proxy, pki, ca_dir):
    """A CA the daemon made in CA_DIR (it starts and stops once)."""
    p = make_proxy(proxy={"ca_dir": str(ca_dir), "allow_ports": [443]}, hosts={API: pinned_entry(pki, "api", "int-a")})
    assert p.stop() == 0
    assert (ca_dir / "ca.key").exists()
    assert stat.S_IMODE((ca_dir / "ca.key").stat().st_mode) == 0o600
    return ca_dir


def test_a_ca_dir_owned_by_another_user_is_refused(make_proxy, pki, tmp_path):
    needs_root()
    ca_dir = tmp_path / "theirs"
    ca_dir.mkdir(mode=0o700)
    os.chown(ca_dir, OTHER_UID, OTHER_UID)
    error = start_failure(make_proxy, pki, ca_dir)
    assert f"belongs to uid {OTHER_UID}" in error and "chown" in error, error
    assert not (ca_dir / "ca.key").exists(), "no key may be written into another user's directory"


def test_a_key_owned_by_another_user_is_refused(make_proxy, pki, tmp_path):
    needs_root()
    ca_dir = made_ca(make_proxy, pki, tmp_path / "ca")
    os.chown(ca_dir / "ca.key", OTHER_UID, OTHER_UID)
    error = start_failure(make_proxy, pki, ca_dir)
    assert "ca.key belongs to uid" in error and "Delete ca.key and ca.pem" in error, error


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660])
def test_a_key_others_can_read_is_refused(make_proxy, pki, tmp_path, mode):
    ca_dir = made_ca(make_proxy, pki, tmp_path / "ca")
    os.chmod(ca_dir / "ca.key", mode)
    error = start_failure(make_proxy, pki, ca_dir)
    assert f"mode {mode:o}" in error and "chmod 600" in error, error
    assert stat.S_IMODE((ca_dir / "ca.key").stat().st_mode) == mode, "the key's mode is the operator's to fix"


def test_an_own_directory_with_a_loose_mode_is_made_private(make_proxy, pki, tmp_path):
    ca_dir = made_ca(make_proxy, pki, tmp_path / "ca")
    os.chmod(ca_dir, 0o755)
    p = make_proxy(proxy={"ca_dir": str(ca_dir), "allow_ports": [443]}, hosts={API: pinned_entry(pki, "api", "int-a")})
    assert p.alive()
    assert stat.S_IMODE(ca_dir.stat().st_mode) == 0o700


def ca_command(pinproxy, config: Path, *, passwd: Path | None = None) -> subprocess.CompletedProcess:
    """`pinproxy ca --config CONFIG`; with PASSWD, in a private mount namespace where it is /etc/passwd."""
    argv = [str(pinproxy), "ca", "--config", str(config)]
    if passwd is not None:
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mount --bind "$0" /etc/passwd && exec "$@"', str(passwd), *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)


def test_ca_reads_the_certificate_of_a_directory_it_does_not_own(pinproxy, make_proxy, pki, tmp_path):
    """As root running `pinproxy ca` on the service's directory: the certificate is printed; the
    directory and key stay the service's."""
    needs_root()
    ca_dir = made_ca(make_proxy, pki, tmp_path / "ca")
    for path in (ca_dir, ca_dir / "ca.pem", ca_dir / "ca.key"):
        os.chown(path, OTHER_UID, OTHER_UID)
    config = tmp_path / "ca.toml"
    config.write_text(f'[proxy]\nca_dir = "{ca_dir}"\n')
    r = ca_command(pinproxy, config)
    assert r.returncode == 0, r
    assert r.stdout == f"{ca_dir / 'ca.pem'}\n" + (ca_dir / "ca.pem").read_text(), r
    assert (ca_dir / "ca.key").stat().st_uid == OTHER_UID and ca_dir.stat().st_uid == OTHER_UID


@pytest.mark.parametrize("owner, name", [(64990, "pinproxy"), (61234, None)])
def test_the_advice_for_the_services_directory_is_to_start_the_service(pinproxy, tmp_path, owner, name):
    """A directory of the service's user (the static user `pinproxy`, or a DynamicUser uid with no
    name while its unit is stopped) without a CA yet: only the service may create it there; the
    advice is to start it, never to chown the directory to root."""
    needs_root()
    ca_dir = tmp_path / "state"
    ca_dir.mkdir(mode=0o700)
    os.chown(ca_dir, owner, owner)
    config = tmp_path / "ca.toml"
    config.write_text(f'[proxy]\nca_dir = "{ca_dir}"\n')
    passwd = tmp_path / "passwd"
    passwd.write_text(Path("/etc/passwd").read_text()
                      + (f"{name}:x:{owner}:{owner}:pinproxy:/nonexistent:/usr/sbin/nologin\n" if name else ""))
    r = ca_command(pinproxy, config, passwd=passwd)
    assert r.returncode == 1, r
    whose = f"uid {owner} (pinproxy), the user the pinproxy service runs as" if name else f"uid {owner}, a systemd DynamicUser"
    assert whose in r.stderr, r
    assert "systemctl start pinproxy" in r.stderr and "chown -R" not in r.stderr, r
    assert not (ca_dir / "ca.key").exists()


def test_a_system_user_keeps_its_ca_in_var_lib_whatever_home_it_inherited(pinproxy, tmp_path):
    """The case of issue 33: the daemon run by hand as a system user (here `daemon`, uid 1) with
    root's HOME inherited (setpriv, sudo -u and su keep it) used ~/.local/state/pinproxy under
    /root and could not start. A system user's CA lives in /var/lib/pinproxy, as under systemd's
    StateDirectory=; the test mounts a tmpfs on /var/lib in a private mount namespace, so the
    host's /var/lib is never touched."""
    needs_root()
    public = Path(tempfile.mkdtemp(prefix="pinproxy-system-user-", dir="/tmp"))
    try:
        public.chmod(0o755)
        port = free_port()
        config = public / "pinproxy.toml"
        config.write_text(f'[proxy]\nlisten = ["127.0.0.1:{port}"]\n')
        config.chmod(0o644)
        script = f"""
            set -e
            mount -t tmpfs tmpfs /var/lib
            install -d -o daemon -g daemon -m 0700 /var/lib/pinproxy
            as_daemon="setpriv --reuid=daemon --regid=daemon --init-groups env HOME=/root"
            $as_daemon {pinproxy} ca --config {config} | head -n 1
            $as_daemon {pinproxy} run --config {config} > /dev/null 2> {public}/daemon.log &
            daemon=$!
            for i in $(seq 1 200); do grep -q 'event=started' {public}/daemon.log && break; sleep 0.05; done
            kill -TERM $daemon; wait $daemon || true
            stat -c '%U %a' /var/lib/pinproxy/ca.key
        """
        p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], capture_output=True,
                           text=True, timeout=TIMEOUT * 3)
        log = (public / "daemon.log").read_text() if (public / "daemon.log").exists() else ""
        assert p.returncode == 0, (p, log)
        assert p.stdout.splitlines() == ["/var/lib/pinproxy/ca.pem", "daemon 600"], (p, log)
        assert "event=started" in log and "CA /var/lib/pinproxy/ca.pem" in log, log
    finally:
        shutil.rmtree(public, ignore_errors=True)
