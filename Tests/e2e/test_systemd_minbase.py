"""The package on a minimal Debian 12: a systemd box whose root is a debootstrap minbase tree
(PINPROXY_MINBASE_ROOT; `scripts/setup --tests` makes one there, with the .debs the package
depends on in apt's cache, since the box has no network). `apt install ./pinproxy_….deb` brings
what the package declares and nothing of a Swift toolchain; the default `trust = "system"` finds
its store, `ca --bundle` and `ca --install` work, the documentation is where Debian keeps it,
`dpkg --verify` passes, and the service pins a client (curl against `openssl s_server`).

Skips with one line without PINPROXY_MINBASE_ROOT.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import pki as pkilib
from systemd_box import Box, require_box, wait_for

MINBASE = os.environ.get("PINPROXY_MINBASE_ROOT")
if not MINBASE:
    pytest.skip("no minimal Debian root: set PINPROXY_MINBASE_ROOT=DIR (scripts/setup --tests makes one there)",
                allow_module_level=True)
require_box()
if not os.access(Path(MINBASE) / "lib/systemd/systemd", os.X_OK):
    pytest.fail(f"PINPROXY_MINBASE_ROOT={MINBASE} has no systemd: run scripts/setup --tests to make it", pytrace=False)

APT = ["apt-get", "install", "-y", "-o", "Dpkg::Options::=--force-confold"]


@pytest.fixture(scope="module")
def box(tmp_path_factory, deb):
    work = tmp_path_factory.mktemp("minbase")
    os.chmod(work, 0o755)
    shutil.copy(deb, work / deb.name)
    root = pkilib.make_root("pinproxy minbase test root")
    leaf = pkilib.make_leaf("api.test", root, san_dns=["api.test"])
    pkilib.write_pem(work / "root.pem", root.cert)
    leaf.write(work, "leaf", root)
    (work / "pin").write_text(leaf.spki_pin)
    for f in work.iterdir():
        os.chmod(f, 0o644)
    b = Box(binds=[str(work)], root=Path(MINBASE))
    b.start()
    b.work = work
    b.deb = work / deb.name
    try:
        yield b
    finally:
        b.stop()


def test_apt_installs_it_with_what_it_declares(box):
    assert box.run("test", "-e", "/etc/ssl/certs/ca-certificates.crt").returncode != 0, "ca-certificates before install"
    p = box.run(*APT, str(box.deb), timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    installed = box.out("dpkg-query", "-W", "-f=${Package} ${Status}\n")
    for needed in ("pinproxy", "ca-certificates", "publicsuffix", "libssl3", "libevent-core-2.1-7", "adduser"):
        assert f"{needed} install ok installed" in installed, needed
    assert "swift" not in installed.lower()
    assert "nftables install ok installed" in installed   # apt installs Recommends by default
    verify = box.run("dpkg", "--verify", "pinproxy")
    assert verify.returncode == 0 and verify.stdout == "", verify


def test_the_documentation_is_where_debian_keeps_it(box):
    docs = box.out("ls", "/usr/share/doc/pinproxy/docs")
    assert "deployment.md" in docs and "configuration.md" in docs, docs
    assert box.run("test", "-s", "/usr/share/doc/pinproxy/README.md").returncode == 0
    config = box.out("cat", "/etc/pinproxy/pinproxy.toml")
    assert "/usr/share/doc/pinproxy/docs/deployment.md" in config


def test_the_system_store_the_bundle_and_install_work(box):
    check = box.run("pinproxy", "check", "--config", "/etc/pinproxy/pinproxy.toml")
    assert check.returncode == 0, check
    box.run("systemctl", "enable", "--now", "pinproxy", check=True)
    box.wait_active("pinproxy.service")
    bundle = box.run("pinproxy", "ca", "--bundle", "/tmp/bundle.pem", "--config", "/etc/pinproxy/pinproxy.toml")
    assert bundle.returncode == 0, bundle
    assert box.out("grep", "-c", "BEGIN CERTIFICATE", "/tmp/bundle.pem").strip() not in ("0", "1")
    install = box.run("pinproxy", "ca", "--install", "--config", "/etc/pinproxy/pinproxy.toml")
    assert install.returncode == 0, install
    assert box.run("test", "-e", "/usr/local/share/ca-certificates/pinproxy.crt").returncode == 0


def test_the_service_pins_a_client(box):
    pin = (box.work / "pin").read_text()
    box.write("/etc/pinproxy/pinproxy.toml", f"""[proxy]
listen = ["127.0.0.1:3128"]
allow_ports = [8443]
block_private_destinations = false

[resolve]
"api.test" = "127.0.0.1"

[default]
action = "deny"

[hosts."api.test"]
trust = ["/etc/pinproxy/root.pem"]
pin = "public-key"
pins = ["{pin}"]
""")
    box.run("install", "-m", "0644", str(box.work / "root.pem"), "/etc/pinproxy/root.pem", check=True)
    p = box.run(*APT, "curl", "openssl", timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    box.spawn("origin", "openssl", "s_server", "-quiet", "-accept", "127.0.0.1:8443", "-www",
              "-cert", str(box.work / "leaf.pem"), "-key", str(box.work / "leaf.key"),
              "-cert_chain", str(box.work / "root.pem"))
    box.wait_port(8443)
    box.run("systemctl", "restart", "pinproxy", check=True)
    box.wait_active("pinproxy.service")
    curl = wait_for(lambda: (c := box.run("curl", "-sS", "--max-time", "20", "-x", "http://127.0.0.1:3128",
                                          "https://api.test:8443/")).returncode == 0 and c,
                    30, "a pinned request through the service")
    assert "s_server" in curl.stdout or "Ciphers" in curl.stdout, curl.stdout[:500]
    assert "api.test" in box.journal("pinproxy")
