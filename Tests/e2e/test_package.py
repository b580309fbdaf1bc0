"""The Debian package `scripts/package` builds: its control fields and contents (dpkg-deb), its
maintainer scripts run against logging stubs of systemctl, deb-systemd-invoke,
deb-systemd-helper, adduser, getent and nft (in a private mount namespace, with fresh tmpfs on
/var/lib, /etc/systemd/system and /run), the binary extracted into a temporary root (it runs,
checks the shipped config, and links no Swift library), and lintian.

The package is a release build (minutes): it is built once per session, in scripts/package's
own scratch path (.build-package, so a second run reuses it), or taken from PINPROXY_DEB.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from proxy_harness import REPO, TIMEOUT, clean_env

if shutil.which("dpkg-deb") is None:
    if os.environ.get("CI"):
        pytest.fail("dpkg-deb is missing: scripts/setup --tests installs dpkg-dev", pytrace=False)
    pytest.skip("no dpkg-deb here: the Debian package is not built (scripts/setup --tests installs dpkg-dev)",
                allow_module_level=True)

VERSION = re.search(r'public static let version = "([^"]+)"',
                    (REPO / "Sources/PinproxyInterop/BuildInfo.swift").read_text()).group(1)
UNITS = sorted(p.name for p in (REPO / "systemd").iterdir() if p.suffix in (".service", ".socket"))


def dpkg_deb(*args) -> str:
    return subprocess.run(["dpkg-deb", *map(str, args)], capture_output=True, text=True, check=True,
                          timeout=TIMEOUT).stdout


@pytest.fixture(scope="session")
def extracted(deb, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("root")
    dpkg_deb("-x", deb, root)
    dpkg_deb("-e", deb, root / "DEBIAN")
    return root


def test_the_file_name_and_control_fields(deb):
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()
    assert deb.name == f"pinproxy_{VERSION}-1_{arch}.deb", deb
    field = {name: dpkg_deb("-f", deb, name).strip() for name in
             ("Package", "Version", "Architecture", "Maintainer", "Depends", "Recommends", "Section", "Priority",
              "Description")}
    assert field["Package"] == "pinproxy" and field["Version"] == f"{VERSION}-1" and field["Architecture"] == arch, field
    assert field["Section"] == "net" and field["Priority"] == "optional" and field["Maintainer"], field
    depends = [d.strip().split(" ")[0] for d in field["Depends"].split(",")]
    for needed in ("libc6", "libssl3", "libevent-core-2.1-7", "libevent-extra-2.1-7", "libevent-openssl-2.1-7", "libevent-pthreads-2.1-7",
                   "libnghttp2-14", "libstdc++6", "publicsuffix", "adduser", "ca-certificates"):
        assert needed in depends, field["Depends"]
    assert field["Recommends"] == "nftables", field
    assert not [d for d in depends if "swift" in d], field["Depends"]
    assert "neither enabled nor started" in field["Description"], field


def test_the_contents(deb, extracted):
    listed = {line.split()[-1].lstrip(".") for line in dpkg_deb("-c", deb).splitlines()}
    files = {p for p in listed if not p.endswith("/")}
    commands = sorted(p.name[len("pinproxy-"):-len(".1.gz")] for p in (extracted / "usr/share/man/man1").glob("pinproxy-*.1.gz"))
    assert {"run", "check", "evaluate", "ca", "reload", "diagnose", "pin", "wait"} <= set(commands), commands
    expected = {
        "/usr/bin/pinproxy",
        "/etc/pinproxy/pinproxy.toml",
        "/usr/share/man/man1/pinproxy.1.gz",
        "/usr/share/man/man5/pinproxy.toml.5.gz",
        "/usr/share/bash-completion/completions/pinproxy",
        "/usr/share/zsh/vendor-completions/_pinproxy",
        "/usr/share/fish/vendor_completions.d/pinproxy.fish",
        "/usr/share/doc/pinproxy/copyright",
        "/usr/share/doc/pinproxy/changelog.Debian.gz",
        "/usr/share/doc/pinproxy/changelog.gz",
        "/usr/share/doc/pinproxy/README.md",
        "/usr/share/lintian/overrides/pinproxy",
        *(f"/usr/share/doc/pinproxy/docs/{page.name}" for page in (REPO / "docs").glob("*.md")),
        # pinproxy.toml(5), once scripts/manpages writes it (generated from the key declarations)
        *(f"/usr/share/man/man5/{page.name}" for page in (extracted / "usr/share/man/man5").glob("*.5.gz")),
        *(f"/lib/systemd/system/{unit}" for unit in UNITS),
        *(f"/usr/share/man/man1/pinproxy-{command}.1.gz" for command in commands),
    }
    assert files == expected, (files - expected, expected - files)
    assert (extracted / "DEBIAN/conffiles").read_text() == "/etc/pinproxy/pinproxy.toml\n"
    installed = (extracted / "etc/pinproxy/pinproxy.toml").read_text()
    # config/pinproxy.toml, its documentation references pointing at /usr/share/doc/pinproxy
    assert "# Documentation: /usr/share/doc/pinproxy/README.md and /usr/share/doc/pinproxy/docs/.\n" in installed
    shipped = (REPO / "config/pinproxy.toml").read_text()
    assert re.sub(r"\bdocs/", "/usr/share/doc/pinproxy/docs/", shipped).splitlines() == \
        [line for line in installed.splitlines() if not line.startswith("# Documentation: ")]
    for page in re.findall(r"/usr/share/doc/pinproxy/docs/([a-z-]+\.md)", installed):
        assert (extracted / "usr/share/doc/pinproxy/docs" / page).is_file(), page
    service = (extracted / "lib/systemd/system/pinproxy.service").read_text()
    assert "ExecStart=/usr/bin/pinproxy run --config /etc/pinproxy/pinproxy.toml" in service, service
    # systemctl reload waits for the daemon's result of that reload (RuntimeDirectory=) and fails with it.
    assert "ExecReload=/usr/bin/pinproxy reload --config /etc/pinproxy/pinproxy.toml --pid $MAINPID --restart-pending-ok" in service, service
    assert "RuntimeDirectory=pinproxy" in service and "Type=notify" in service, service
    assert "/usr/local" not in service and "# Installed by the pinproxy package into /lib/systemd/system/" in service, service
    owners = {line.split()[1] for line in dpkg_deb("-c", deb).splitlines()}
    assert owners == {"root/root"}, owners
    for script in ("postinst", "prerm", "postrm"):
        assert os.access(extracted / "DEBIAN" / script, os.X_OK), script


def test_the_extracted_binary_runs_without_swift_libraries(extracted):
    binary = extracted / "usr/bin/pinproxy"
    ldd = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, timeout=TIMEOUT, env=clean_env(LD_LIBRARY_PATH=""))
    assert ldd.returncode == 0, ldd
    assert not re.search(r"swift|Foundation|dispatch|BlocksRuntime|icu|not found", ldd.stdout, re.I), ldd.stdout
    for line in ldd.stdout.splitlines():  # each library from the system's own directories
        target = line.split("=>")[-1].strip().split(" ")[0]
        assert target.startswith(("/lib", "/usr/lib", "linux-vdso")) or line.strip().startswith("/lib"), line
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=TIMEOUT)
    assert re.fullmatch(rf"pinproxy {re.escape(VERSION)} \(commit [0-9a-f]{{7}}(-dirty)?, \d{{4}}-\d{{2}}-\d{{2}}\)\n", version.stdout), version
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0 and not os.environ.get("PINPROXY_DEB"):
        assert f"(commit {head.stdout.strip()}" in version.stdout, version
    check = subprocess.run([str(binary), "check", "--config", str(extracted / "etc/pinproxy/pinproxy.toml")],
                           capture_output=True, text=True, timeout=TIMEOUT)
    assert check.returncode == 0 and check.stdout.startswith(f"{extracted}/etc/pinproxy/pinproxy.toml: ok"), check
    page = subprocess.run(["man", "--warnings", "-l", str(extracted / "usr/share/man/man1/pinproxy-check.1.gz")],
                          capture_output=True, text=True, timeout=TIMEOUT, env=clean_env(MANWIDTH="100"))
    assert page.returncode == 0 and page.stderr == "" and "--config" in page.stdout, page


def test_md5sums_cover_every_file_but_the_conffile(deb, extracted):
    listed = {line.split(None, 1)[1] for line in (extracted / "DEBIAN/md5sums").read_text().splitlines()}
    files = {str(p.relative_to(extracted)) for p in extracted.rglob("*") if p.is_file() and p.parts[len(extracted.parts)] != "DEBIAN"}
    assert listed == files - {"etc/pinproxy/pinproxy.toml"}, (listed ^ files)
    check = subprocess.run(["md5sum", "--check", "--quiet", str(extracted / "DEBIAN/md5sums")], cwd=extracted,
                           capture_output=True, text=True, timeout=TIMEOUT)
    assert check.returncode == 0, check


def test_man_page_footers_read_cleanly_at_80_columns(extracted):
    for page in sorted((extracted / "usr/share/man").rglob("*.gz")):
        text = subprocess.run(["man", "-l", str(page)], capture_output=True, text=True, timeout=TIMEOUT,
                              env=clean_env(MANWIDTH="80", MAN_KEEP_FORMATTING="")).stdout
        footer = text.rstrip("\n").splitlines()[-1]
        assert re.fullmatch(rf"pinproxy {re.escape(VERSION)} +\d{{4}}-\d{{2}}-\d{{2}} +[A-Z.-]+\(\d\)", footer.strip()), (page.name, footer)


def test_dpkg_shlibdeps_finds_no_useless_dependency(extracted, tmp_path):
    (tmp_path / "debian").mkdir()
    (tmp_path / "debian/control").write_text("Source: pinproxy\n\nPackage: pinproxy\nArchitecture: any\n")
    p = subprocess.run(["dpkg-shlibdeps", "-O", "--warnings=7", str(extracted / "usr/bin/pinproxy")], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "warning" not in p.stderr, p.stderr


def test_the_binary_names_no_checkout_path(extracted):
    strings = subprocess.run(["strings", "-a", str(extracted / "usr/bin/pinproxy")], capture_output=True, text=True,
                             timeout=120).stdout
    found = sorted({line for line in strings.splitlines() if str(REPO) in line})
    assert found == [], found[:20]


def test_the_binary_carries_no_icu_and_no_full_foundation(extracted):
    """Sources import FoundationEssentials only, and no dependency uses more: neither the full
    Foundation (its module name) nor ICU's data (34 MB, named icudtNNl-...) is linked in."""
    binary = (extracted / "usr/bin/pinproxy").read_bytes()
    assert not re.search(rb"icudt\d+l", binary), "ICU's data is linked in"
    assert b"\x00Foundation\x00" not in binary and b"\x00FoundationInternationalization\x00" not in binary, \
        "the full Foundation is linked in"
    assert len(binary) < 30_000_000, len(binary)  # 19.1 MB on 2026-11-27, 63.2 MB with ICU


def test_lintian_finds_no_error_and_none_of_the_known_warnings(deb):
    if shutil.which("lintian") is None:
        pytest.fail("lintian is missing: scripts/setup --tests installs it", pytrace=False)
    r = subprocess.run(["lintian", "--no-cfg", "--fail-on", "error", str(deb)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and not re.search(r"^E: ", r.stdout, re.M), r.stdout + r.stderr
    for tag in ("no-md5sums-control-file", "hardening-no-bindnow", "hardening-no-fortify-functions",
                "hardening-no-relro", "md5sums-lists-nonexistent-file", "file-missing-in-md5sums"):
        assert tag not in r.stdout, r.stdout


@pytest.mark.skipif(os.environ.get("PINPROXY_SLOW_TESTS") != "1",
                    reason="two release builds (set PINPROXY_SLOW_TESTS=1)")
@pytest.mark.skipif(bool(os.environ.get("PINPROXY_SANITIZER")),
                    reason="the package's binary is the same in a sanitizer run: checked in the plain run")
def test_two_builds_from_two_directories_give_the_same_deb(deb, tmp_path):
    """Two clones of HEAD (its committed state) in two directories, each built from scratch: the
    two .deb files are byte for byte the same."""
    epoch = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%ct"], capture_output=True, text=True).stdout.strip()
    debs = []
    for name in ("one", "other-place"):
        copy = tmp_path / name / "pinproxy"
        subprocess.run(["git", "clone", "-q", "--no-local", str(REPO), str(copy)], check=True, timeout=600)
        p = subprocess.run([str(copy / "scripts/package"), str(tmp_path / f"out-{name}")], cwd=copy, capture_output=True,
                           text=True, timeout=7200, stdin=subprocess.DEVNULL,
                           env=clean_env(SOURCE_DATE_EPOCH=epoch))
        assert p.returncode == 0, p.stderr[-4000:]
        debs.append(Path(p.stdout.strip().splitlines()[-1]))
        shutil.rmtree(copy / ".build-package", ignore_errors=True)
    assert debs[0].read_bytes() == debs[1].read_bytes(), \
        subprocess.run(["cmp", "-l", str(debs[0]), str(debs[1])], capture_output=True, text=True).stdout[:2000]


# ---------------------------------------------------------------- maintainer scripts

STUB = """#!/bin/sh
echo "$(basename "$0") $*" >> "$STUB_LOG"
case "$(basename "$0") $*" in
    "getent passwd pinproxy") [ -n "${STUB_USER_EXISTS:-}" ] || exit 2; echo "pinproxy:x:999:999::/var/lib/pinproxy:/usr/sbin/nologin" ;;
    "nft list table inet pinproxy") [ -n "${STUB_NFT_TABLE:-}" ] || exit 1 ;;
    "systemctl --quiet is-active pinproxy-egress.service") [ -n "${STUB_EGRESS_ON:-}" ] || exit 3 ;;
    "systemctl reload pinproxy-egress.service") [ -z "${STUB_EGRESS_RELOAD_FAILS:-}" ] || exit 1 ;;
esac
exit 0
"""

# In a private mount namespace: fresh tmpfs where the scripts write, systemd running (its
# /run/systemd/system), then the script; afterwards, what is left in /var/lib and the unit dir.
NAMESPACE = r"""
set -e
mount -t tmpfs tmpfs /var/lib
mount -t tmpfs tmpfs /etc/systemd/system
mount -t tmpfs tmpfs /run
mkdir -p /run/systemd/system
eval "$PP_PREPARE"
status=0
"$@" || status=$?
echo "left: $(cd /var/lib && find . -mindepth 1 | sort | tr '\n' ' ')"
exit $status
"""


@pytest.fixture
def maintainer(extracted, tmp_path):
    """run(SCRIPT, *ARGS, stubs=..., prepare=SHELL, **env) -> (exit, stub calls, stdout, stderr)."""
    if shutil.which("unshare") is None or not Path("/etc/systemd/system").is_dir():
        pytest.fail("needs unshare(1) and /etc/systemd/system (scripts/setup --tests installs systemd)", pytrace=False)

    def run(script: str, *args: str, stubs=("systemctl", "deb-systemd-invoke", "deb-systemd-helper", "adduser",
                                           "getent", "nft"), prepare: str = "", **env: str):
        bin_dir = tmp_path / f"stubs-{script}-{len(list(tmp_path.iterdir()))}"
        bin_dir.mkdir()
        for name in stubs:
            (bin_dir / name).write_text(STUB)
            (bin_dir / name).chmod(0o755)
        log = bin_dir / "calls.log"
        log.write_text("")
        p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", NAMESPACE, "sh",
                            str(extracted / "DEBIAN" / script), *args],
                           env={"PATH": f"{bin_dir}:/usr/bin:/bin", "STUB_LOG": str(log), "PP_PREPARE": prepare, **env},
                           capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        return p.returncode, log.read_text().splitlines(), p.stdout, p.stderr

    return run


def never_enables_or_starts(calls: list[str]) -> None:
    for call in calls:
        assert not re.search(r"\b(enable|start|restart|reload-or-restart)\b", call.replace("try-restart", "")), calls


def test_postinst_on_install_makes_the_user_and_reloads_systemd_only(maintainer):
    code, calls, _, err = maintainer("postinst", "configure", "")
    assert code == 0, err
    assert "getent passwd pinproxy" in calls, calls
    adduser = [c for c in calls if c.startswith("adduser ")]
    assert len(adduser) == 1 and "--system" in adduser[0] and adduser[0].endswith(" pinproxy"), calls
    assert "systemctl --system daemon-reload" in calls, calls
    never_enables_or_starts(calls)
    assert not [c for c in calls if "restart" in c], calls
    assert "shadows" not in err, err


def test_postinst_on_upgrade_only_try_restarts(maintainer):
    code, calls, _, err = maintainer("postinst", "configure", "0.1.0-1", STUB_USER_EXISTS="1")
    assert code == 0, err
    assert not [c for c in calls if c.startswith("adduser")], calls
    assert calls[-3:] == ["systemctl --system daemon-reload", "deb-systemd-invoke try-restart pinproxy.service",
                          "systemctl --quiet is-active pinproxy-egress.service"], calls
    never_enables_or_starts(calls)


def test_postinst_on_upgrade_loads_the_new_rules_into_a_lock_that_is_on(maintainer):
    """A fix to the lock's rules reaches a host whose lock is on at the upgrade (a reload: one
    nft transaction, the lock never lifts); a lock that is off stays off (above)."""
    code, calls, _, err = maintainer("postinst", "configure", "0.1.0-1", STUB_USER_EXISTS="1", STUB_EGRESS_ON="1")
    assert code == 0, err
    assert calls[-2:] == ["systemctl --quiet is-active pinproxy-egress.service", "systemctl reload pinproxy-egress.service"], calls
    never_enables_or_starts(calls)
    # A reload that fails does not fail the upgrade, and says what to run.
    code, calls, _, err = maintainer("postinst", "configure", "0.1.0-1", STUB_USER_EXISTS="1", STUB_EGRESS_ON="1",
                                     STUB_EGRESS_RELOAD_FAILS="1")
    assert code == 0 and "run pinproxy egress apply" in err, (calls, err)
    # A first install never touches the lock.
    code, calls, _, err = maintainer("postinst", "configure", "", STUB_EGRESS_ON="1")
    assert code == 0 and not [c for c in calls if "egress" in c], calls


def test_postinst_warns_about_units_from_install_sh(maintainer):
    code, _, _, err = maintainer("postinst", "configure", "", STUB_USER_EXISTS="1",
                                 prepare="touch /etc/systemd/system/pinproxy.service")
    assert code == 0, err
    assert "/etc/systemd/system/pinproxy.service (from scripts/install.sh?) shadows /lib/systemd/system/pinproxy.service" in err, err
    assert "pinproxy.socket" not in err, err


def test_prerm_stops_the_egress_lock_then_the_daemon_and_nothing_on_upgrade(maintainer):
    code, calls, _, err = maintainer("prerm", "remove")
    assert code == 0, err
    assert calls == ["deb-systemd-invoke stop pinproxy-egress.service",
                     "deb-systemd-invoke stop pinproxy.service pinproxy.socket pinproxy-transparent.socket pinproxy-transparent6.socket"], calls
    code, calls, _, err = maintainer("prerm", "upgrade", "0.2.1-1")
    assert code == 0 and calls == [], (calls, err)


def test_postrm_deletes_a_left_egress_table(maintainer):
    code, calls, _, err = maintainer("postrm", "remove", STUB_NFT_TABLE="1")
    assert code == 0, err
    assert calls[:2] == ["nft list table inet pinproxy", "nft delete table inet pinproxy"], calls
    code, calls, _, err = maintainer("postrm", "remove")  # no table: nothing deleted
    assert code == 0 and "nft delete table inet pinproxy" not in calls, (calls, err)
    no_nft = ("systemctl", "deb-systemd-invoke", "deb-systemd-helper", "adduser", "getent")
    code, calls, _, err = maintainer("postrm", "remove", stubs=no_nft)  # no nftables at all
    assert code == 0 and calls == ["systemctl --system daemon-reload"], (calls, err)


def test_postrm_purge_deletes_the_ca_and_says_clients_still_trust_it(maintainer):
    prepare = "mkdir -p /var/lib/pinproxy && touch /var/lib/pinproxy/ca.key /var/lib/pinproxy/ca.pem"
    code, calls, out, err = maintainer("postrm", "purge", prepare=prepare)
    assert code == 0, err
    assert "left: \n" in out, out  # nothing of pinproxy's left in /var/lib
    assert "deleted the local CA in /var/lib/pinproxy" in err and "still do" in err, err
    assert "deb-systemd-helper purge pinproxy.service pinproxy.socket pinproxy-egress.service pinproxy-transparent.socket pinproxy-transparent6.socket" in calls, calls
    code, _, out, err = maintainer("postrm", "remove", prepare=prepare)  # remove keeps the CA
    assert code == 0 and "ca.key" in out and "deleted" not in err, (out, err)
