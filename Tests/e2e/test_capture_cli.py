"""The command-line side of the egress lock: `pin --connect` and `diagnose` notice that their own
connection was captured, and `ca --install` / `ca --uninstall` change the system trust store
(in a private mount namespace, so the host's store is untouched)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from capture_harness import capture, public_dir  # noqa: F401 (fixtures)
from proxy_harness import pinned_entry

CAPTURED = "captured by pinproxy: run as an exempt user"


def public_setup(capture, proxy):
    """A copy of the binary, and a config whose ca_dir holds the proxy's CA certificate, that
    user nobody can read."""
    binary = capture.public / "pinproxy"
    shutil.copyfile(proxy.bin, binary)
    binary.chmod(0o755)
    ca_dir = capture.public / "ca"
    ca_dir.mkdir()
    ca_dir.chmod(0o755)
    shutil.copyfile(proxy.ca_path, ca_dir / "ca.pem")
    (ca_dir / "ca.pem").chmod(0o644)
    config = capture.public / "client.toml"
    config.write_text(f'[proxy]\nca_dir = "{ca_dir}"\n')
    config.chmod(0o644)
    return binary, config


@pytest.mark.parametrize("command", [["pin", "--connect", "api.test:443", "--connect-to", "127.0.0.1"],
                                     ["diagnose", "api.test:443", "--connect-to", "127.0.0.1"]])
def test_pin_connect_and_diagnose_notice_they_were_captured(capture, pki, command):
    origin = capture.origin("api")
    proxy = capture.proxy(hosts={"api.test": pinned_entry(pki, "api", "api-newkey")})
    proxy.lock()
    binary, config = public_setup(capture, proxy)

    # User nobody is captured: the chain it gets is the local CA's.
    p = capture.client([str(binary), *command, "--config", str(config)])
    assert p.returncode == 1, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    assert CAPTURED in p.stderr, p.stderr
    assert pki.spki("api") not in p.stdout, "a captured command printed pins"

    # root is exempt: the real server's chain, its real pins.
    p = capture.ns.run(str(binary), *command, "--config", str(config))
    assert CAPTURED not in p.stderr, p.stderr
    assert pki.spki("api") in p.stdout, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    assert origin.connections >= 1


def private_store(*argv: str) -> list[str]:
    """ARGV in a private mount namespace whose CA directories are empty tmpfs mounts, so that
    update-ca-certificates rebuilds a store of its own and the host's is never touched."""
    script = ("mount -t tmpfs tmpfs /usr/local/share/ca-certificates && mount -t tmpfs tmpfs /etc/ssl/certs && "
              "mount -t tmpfs tmpfs /etc/ca-certificates/update.d && "
              "update-ca-certificates --fresh >/dev/null 2>&1 && exec \"$@\"")
    return ["unshare", "--mount", "sh", "-c", script, "sh", *argv]


def test_ca_install_and_uninstall_in_a_private_mount_namespace(pinproxy, tmp_path):
    if not shutil.which("update-ca-certificates"):
        pytest.fail("update-ca-certificates is not installed (ca-certificates)", pytrace=False)
    host_store = os.stat("/etc/ssl/certs/ca-certificates.crt")
    config = tmp_path / "pinproxy.toml"
    config.write_text('[proxy]\nca_dir = "ca"\n')
    ca = subprocess.run([str(pinproxy), "ca", "--config", str(config)], capture_output=True, text=True, timeout=60)
    assert ca.returncode == 0, ca.stderr
    pem = ca.stdout.split("\n", 1)[1].strip()

    # One shell in the namespace: install, look, uninstall, look.
    script = f"""
        set -e
        {pinproxy} ca --install --config {config}
        test -f /usr/local/share/ca-certificates/pinproxy.crt
        grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt
        cat /etc/ssl/certs/ca-certificates.crt > {tmp_path}/installed.crt
        ls /etc/ssl/certs > {tmp_path}/installed.ls
        {pinproxy} ca --uninstall
        test ! -e /usr/local/share/ca-certificates/pinproxy.crt
        cat /etc/ssl/certs/ca-certificates.crt > {tmp_path}/uninstalled.crt
        ls /etc/ssl/certs > {tmp_path}/uninstalled.ls
    """
    p = subprocess.run(private_store("sh", "-c", script), capture_output=True, text=True, timeout=120)
    if p.returncode != 0 and "mount" in p.stderr and "permission denied" in p.stderr.lower():
        pytest.skip(f"the kernel forbids a private mount namespace here: {p.stderr.strip()}")
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr}"
    assert "/usr/local/share/ca-certificates/pinproxy.crt: the system trust store now trusts" in p.stdout, p.stdout
    assert "removed /usr/local/share/ca-certificates/pinproxy.crt from the system trust store" in p.stdout, p.stdout
    # It ends with what the clients that keep a store of their own need host-wide.
    assert "  Node.js:  NODE_EXTRA_CA_CERTS=/usr/local/share/ca-certificates/pinproxy.crt" in p.stdout, p.stdout
    assert "REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt  PIP_CERT=/etc/ssl/certs/ca-certificates.crt" in p.stdout, p.stdout
    assert "keytool -importcert -cacerts -noprompt -alias pinproxy -file /usr/local/share/ca-certificates/pinproxy.crt" in p.stdout

    assert pem in (tmp_path / "installed.crt").read_text(), "the CA is not in the rebuilt bundle"
    assert "pinproxy.pem" in (tmp_path / "installed.ls").read_text().split()
    assert pem not in (tmp_path / "uninstalled.crt").read_text(), "the CA stayed in the bundle"
    assert "pinproxy.pem" not in (tmp_path / "uninstalled.ls").read_text().split()
    # The host's own store was never touched.
    assert os.stat("/etc/ssl/certs/ca-certificates.crt") == host_store
    assert not os.path.exists("/usr/local/share/ca-certificates/pinproxy.crt")
