"""Golden output of `check`, `evaluate`, `diagnose` and `pin`: what each prints, byte for byte.

Each case runs the real binary on certificates from the session PKI and compares its exit
status, stdout and stderr with `golden/CASE.txt`. What differs from run to run (the PKI's
pins and serials, directories, ports, days left until a date) is replaced by placeholders
first (`normalise`); every other byte must match. Evaluations use fixed `--at` times.

After an intentional change of output, rewrite the files and review the diff:

    PINPROXY_UPDATE_GOLDEN=1 python3 -m pytest -q Tests/e2e/test_cli_golden_output.py
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

import origin as originlib
import pki as pkilib
from conftest import AT, PIN_X, PIN_Y
from proxy_harness import API, free_port, poll, port_accepts

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("PINPROXY_UPDATE_GOLDEN") == "1"


# ---------------------------------------------------------------- normalising


class Normaliser:
    """Replaces what varies per run with placeholders: `<spki:STEM>`, `<cert:STEM>`,
    `<serial:STEM>`, `<DIR>`, `<PKI>`, `<PORT>`, `<N> day(s)`."""

    def __init__(self, pki, directory: Path):
        self.literal: list[tuple[str, str]] = [(str(directory), "<DIR>"), (str(pki.dir), "<PKI>")]
        # Stems that share a key share a public-key pin: the first stem in sorted order names it.
        for stem in sorted(pki.pins):
            for kind in ("spki", "cert"):
                pin = pki.pins[stem][kind]
                if all(pin != old for old, _ in self.literal):
                    self.literal.append((pin, f"<{kind}:{stem}>"))
        self.serials = {stem: issued.serial for stem, issued in pki.certs.items()}
        self.ports: list[int] = []

    def __call__(self, text: str) -> str:
        for old, new in self.literal:
            text = text.replace(old, new)
        for stem, serial in sorted(self.serials.items()):
            for form in (str(serial), format(serial, "X"), format(serial, "x")):
                text = text.replace(form, f"<serial:{stem}>")
        for port in self.ports:
            text = re.sub(rf"(?<![\w<]){port}(?!\w)", "<PORT>", text)
        text = re.sub(r"\bin \d+ day\(s\)", "in <N> day(s)", text)
        text = re.sub(r"\bEXPIRED \d+ day\(s\) ago", "EXPIRED <N> day(s) ago", text)
        return re.sub(r"\(\d+ bytes\)", "(<N> bytes)", text)


def transcript(normalise: Normaliser, args, code: int, out: str, err: str) -> str:
    command = " ".join(["pinproxy", *(normalise(str(a)) for a in args)])
    return f"$ {command}\nexit {code}\n--- stdout\n{normalise(out)}--- stderr\n{normalise(err)}"


def compare(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
        return
    assert path.is_file(), f"no golden file {path}: run with PINPROXY_UPDATE_GOLDEN=1 and review it"
    expected = path.read_text()
    assert text == expected, f"output of {name} differs from {path}\n--- expected\n{expected}\n--- got\n{text}"


@pytest.fixture
def golden(ws, pki, pinproxy):
    """Runs pinproxy with ARGS (in the workspace, optional ENV) and compares with golden/NAME.txt."""
    normalise = Normaliser(pki, ws.dir)

    def check(name: str, *args, env=None, ports=()):
        normalise.ports = list(ports)
        p = subprocess.run([str(pinproxy), *map(str, args)], cwd=ws.dir, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=120, env=env)
        compare(name, transcript(normalise, args, p.returncode, p.stdout, p.stderr))

    return check


# ---------------------------------------------------------------- check

CHECK_VALID = """\
[proxy]
listen = ["127.0.0.1:8080"]
metrics_listen = "127.0.0.1:9090"
log_format = "json"

[resolve]
"api.test" = "127.0.0.1"

[default]
trust = "system"

[hosts."api.test"]
trust = ["root-a.pem"]
pin = "public-key"
pins = ["%spki:int-a%", "%spki:api%"]

[hosts."*.wild.test"]
trust = "pinned"
pin = "certificate"
certificates = ["wild.pem"]
pins = ["{x}"]
ports = [443, 8443]

[hosts."legacy.test"]
action = "allow-insecure"

[hosts."blocked.test"]
action = "deny"

[hosts."10.0.0.1"]
trust = ["root-a.pem"]
revocation = "crl"
crls = ["crl-int-a.pem"]
""".format(x=PIN_X)


CHECK_WARNINGS = """\
[hosts."api.test"]
trust = ["root-a.pem"]
pin = "public-key"
pins = ["%spki:api%"]

[hosts."report.test"]
enforce = false
pin = "certificate"
pins = ["{x}"]
""".format(x=PIN_X)

CHECK_ERRORS = """\
[proxy]
lisen = "127.0.0.1:8080"

[hosts."api.test"]
trust = ["missing.pem"]
pin = "public-key"
pins = ["sha256/not-base64"]
ports = [0]
"""


def test_check_valid(ws, golden):
    golden("check-valid", "check", "--config", ws.config(CHECK_VALID))


def test_check_warnings(ws, golden):
    golden("check-warnings", "check", "--config", ws.config(CHECK_WARNINGS))


def test_check_errors(ws, golden):
    golden("check-errors", "check", "--config", ws.config(CHECK_ERRORS))


def test_check_embedded_default(golden):
    golden("check-embedded-default", "check")


# ---------------------------------------------------------------- evaluate

TA = 'trust = ["root-a.pem"]\n'


@dataclass
class Case:
    name: str
    entry: str  # the body of [hosts."api.test"] (or a whole config with `whole`)
    chain: str = "api-chain.pem"
    host: str = "api.test"
    port: int | None = None
    at: str = AT
    staple: str | None = None
    whole: bool = False


EVALUATE = [
    Case("allow-public-key-pin", TA + 'pin = "public-key"\npins = ["%spki:int-a%"]\n'),
    Case("allow-certificate-pin-leaf", TA + 'pin = "certificate"\npins = ["%cert:api%"]\n'),
    Case("allow-no-pins", TA),
    Case("pin-mismatch", TA + f'pin = "public-key"\npins = ["{PIN_X}", "{PIN_Y}"]\n'),
    Case("report-only-pin-mismatch", TA + f'enforce = false\npin = "public-key"\npins = ["{PIN_X}"]\n'),
    Case("expired", TA, chain="expired-chain.pem"),
    Case("not-yet-valid", TA, chain="notyet-chain.pem"),
    Case("expired-with-pins", TA + 'pin = "public-key"\npins = ["%spki:int-a%"]\n', chain="expired-chain.pem"),
    Case("untrusted-chain-then-pins", TA + 'pin = "public-key"\npins = ["%spki:untrusted%"]\n', chain="mixed-chain.pem"),
    Case("hostname-mismatch", TA, chain="other-chain.pem"),
    Case("web-pki-rule-common-name", TA, chain="cn-only-chain.pem"),
    Case("web-pki-rule-server-auth", TA, chain="client-only-chain.pem"),
    Case("host-denied", 'action = "deny"\n'),
    Case("port-denied", TA + "ports = [443]\n", port=8443),
    Case("report-only-host-and-port", 'action = "deny"\nenforce = false\nports = [443]\n' + TA, port=8443),
    Case("allow-insecure", 'action = "allow-insecure"\n', chain="expired-selfsigned.pem"),
    Case("trust-none-leaf-pin", 'trust = "none"\npin = "public-key"\npins = ["%spki:self%"]\n', chain="self.pem",
         host="self.test"),
    Case("trust-pinned", 'trust = "pinned"\npin = "certificate"\ncertificates = ["int-a.pem"]\n'),
    Case("pins-expired", TA + f'pin = "public-key"\npins = ["{PIN_X}"]\nexpires = 2026-01-01\n'),
    Case("crl-revoked", TA + 'revocation = "crl"\ncrls = ["crl-int-a.pem"]\n', chain="revoked-chain.pem"),
    Case("crl-good", TA + 'revocation = "crl"\ncrls = ["crl-int-a.pem"]\n'),
    Case("staple-good", TA + 'revocation = "ocsp-staple"\n', staple="ocsp-api-good.der"),
    Case("staple-stale", TA + 'revocation = "ocsp-staple"\n', staple="ocsp-api-stale.der"),
    Case("staple-missing", TA + 'revocation = "ocsp-staple"\n'),
    Case("ip-literal", TA, chain="ip-chain.pem", host="127.0.0.1"),
    Case("deep-chain", TA + 'pin = "public-key"\npins = ["%spki:int-pathlen0%"]\n', chain="deep-chain.pem"),
    Case("custom-check-refuses", TA + 'verify_command = ["/bin/false"]\n'),
    Case("custom-check-passes", TA + 'verify_command = ["/bin/true"]\n'),
    Case("default-entry", '[default]\ntrust = ["root-a.pem"]\n', chain="other-chain.pem", host="other.test",
         whole=True),
]


@pytest.mark.parametrize("case", EVALUATE, ids=[c.name for c in EVALUATE])
def test_evaluate(ws, golden, case):
    text = case.entry if case.whole else f'[hosts."api.test"]\n{case.entry}'
    if case.host != "api.test" and not case.whole:
        text = text.replace('"api.test"', f'"{case.host}"')
    args = ["evaluate", "--config", ws.config(text), "--host", case.host, "--chain", ws.path(case.chain), "--at", case.at]
    if case.port is not None:
        args += ["--port", case.port]
    if case.staple is not None:
        args += ["--staple", ws.path(case.staple)]
    golden(f"evaluate-{case.name}", *args)


def test_evaluate_embedded_default(ws, golden):
    golden("evaluate-embedded-default", "evaluate", "--host", "api.test", "--chain", ws.path("api-chain.pem"),
           "--at", AT)


def test_evaluate_usage_error(ws, golden):
    golden("evaluate-usage-error", "evaluate", "--host", "api.test", "--chain", ws.path("api-chain.pem"),
           "--at", "tomorrow")


# ---------------------------------------------------------------- diagnose


def diagnose_config(ws, port: int, entry: str = "", resolve: bool = True) -> Path:
    text = (f'[resolve]\n"{API}" = "127.0.0.1"\n\n' if resolve else "") + f'[hosts."{API}"]\nports = [{port}]\n' + TA + entry
    return ws.config(text, "diagnose.toml")


@pytest.fixture
def origin(ws):
    started = []

    def make(chain="api-chain.pem", key="api.key", **kw):
        o = originlib.TLSOrigin(ws.path(chain), ws.path(key), name="golden", **kw)
        started.append(o)
        return o

    yield make
    for o in started:
        o.close()


def test_diagnose_tls12_pinned(ws, golden, origin):
    o = origin(max_tls="1.2")
    cfg = diagnose_config(ws, o.port, 'pin = "public-key"\npins = ["%spki:int-a%"]\n')
    golden("diagnose-tls12-pinned", "diagnose", f"{API}:{o.port}", "--config", cfg, ports=[o.port])


def test_diagnose_tls13_pin_mismatch(ws, golden, origin):
    o = origin(min_tls="1.3")
    cfg = diagnose_config(ws, o.port, f'pin = "public-key"\npins = ["{PIN_X}"]\n', resolve=False)
    golden("diagnose-tls13-pin-mismatch", "diagnose", f"{API}:{o.port}", "--config", cfg, "--connect-to", "127.0.0.1",
           ports=[o.port])


def test_diagnose_incomplete_chain(ws, golden, origin):
    o = origin(chain="api.pem")
    golden("diagnose-incomplete-chain", "diagnose", f"{API}:{o.port}", "--config", diagnose_config(ws, o.port),
           ports=[o.port])


def test_diagnose_hostname_mismatch(ws, golden, origin):
    o = origin(chain="other-chain.pem", key="other.key", max_tls="1.2")
    golden("diagnose-hostname-mismatch", "diagnose", f"{API}:{o.port}", "--config", diagnose_config(ws, o.port),
           ports=[o.port])


def test_diagnose_without_config(ws, golden, origin):
    o = origin(max_tls="1.2")
    env = {**os.environ, "SSL_CERT_FILE": str(ws.path("root-a.pem"))}
    golden("diagnose-without-config", "diagnose", f"{API}:{o.port}", "--connect-to", "127.0.0.1", env=env,
           ports=[o.port])


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command for a stapling server")
@pytest.mark.parametrize("status", ["good", "revoked"])
def test_diagnose_staple(ws, golden, status):
    # diagnose evaluates now: the staple is current whenever the test runs.
    now = dt.datetime.now(dt.timezone.utc)
    stem = "api" if status == "good" else "revoked"
    staple = ws.write("staple.der", pkilib.to_der(pkilib.make_ocsp(
        ws.pki.issued(stem), ws.pki.issued("int-a"), status, now - dt.timedelta(days=1), now + dt.timedelta(days=6))))
    port = free_port()
    server = subprocess.Popen(
        ["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-cert", str(ws.path(f"{stem}.pem")),
         "-key", str(ws.path(f"{stem}.key")), "-cert_chain", str(ws.path("int-a.pem")),
         "-status_file", str(staple), "-www", "-quiet", "-tls1_3"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        poll(lambda: port_accepts(port), what="openssl s_server")
        cfg = diagnose_config(ws, port, 'revocation = "ocsp-staple"\n')
        golden(f"diagnose-staple-{status}", "diagnose", f"{API}:{port}", "--config", cfg, ports=[port])
    finally:
        server.kill()
        server.wait()


# ---------------------------------------------------------------- pin


PIN_FILES = {"chain": ["api-chain.pem"], "der-and-rsa": ["api.der", "root-b.pem"], "key": ["api.key"],
             "several": ["self.pem", "deep-chain.pem"]}


@pytest.mark.parametrize("name", PIN_FILES)
def test_pin_files(ws, golden, name):
    golden(f"pin-{name}", "pin", *PIN_FILES[name])


def test_pin_bad_file(ws, golden):
    ws.write("garbage.pem", "not a certificate\n")
    golden("pin-bad-file", "pin", "garbage.pem")


def test_pin_connect(ws, golden, origin):
    o = origin()
    golden("pin-connect", "pin", "--connect", f"127.0.0.1:{o.port}", ports=[o.port])


def test_pin_connect_self_signed_name(ws, golden, origin):
    o = origin(chain="self.pem", key="self.key")
    cfg = ws.config('[resolve]\n"self.test" = "127.0.0.1"\n', "resolve.toml")
    golden("pin-connect-self-signed", "pin", "--connect", f"self.test:{o.port}", "--config", cfg, ports=[o.port])
