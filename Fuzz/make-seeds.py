#!/usr/bin/env python3
"""Writes the fuzzers' fixed data (Fuzz/data) and seed corpora (Fuzz/corpus/TARGET).

Run once when the targets change; the output is committed, so a fuzz run needs no Python.
The certificates come from the end-to-end tests' PKI builders (Tests/e2e/pki.py); their keys
are thrown away. Everything is valid from 2020 to 2045 and judged at 2026-06-01.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

FUZZ = Path(__file__).resolve().parent
REPO = FUZZ.parent
sys.path.insert(0, str(REPO / "Tests" / "e2e"))

import pki  # noqa: E402

DATA = FUZZ / "data"
CORPUS = FUZZ / "corpus"


def seed(target: str, data: bytes) -> None:
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()).write_bytes(data)


def frame(*certs) -> bytes:
    """A verdict-target input: each certificate as a 2-byte big-endian length and its DER."""
    out = b""
    for c in certs:
        der = pki.to_der(c.cert if hasattr(c, "cert") else c)
        out += len(der).to_bytes(2, "big") + der
    return out


def main() -> int:
    for d in (DATA, CORPUS):
        shutil.rmtree(d, ignore_errors=True)
    DATA.mkdir(parents=True)

    d = pki._d
    root = pki.make_root("pinproxy fuzz root")
    inter = pki.make_intermediate("pinproxy fuzz intermediate", root)
    sans = ["api.test", "www.api.test"]
    leaf = pki.make_leaf("api.test", inter, san_dns=sans)
    revoked = pki.make_leaf("api.test", inter, san_dns=sans)
    other_key = pki.make_leaf("api.test", inter, san_dns=sans)
    rsa_leaf = pki.make_leaf("api.test", inter, key="rsa", san_dns=sans)
    wrong_name = pki.make_leaf("other.test", inter, san_dns=["other.test"])
    wildcard = pki.make_leaf("*.api.test", inter, san_dns=["*.api.test"])
    ip_leaf = pki.make_leaf("127.0.0.1", inter, san_dns=[], san_ips=["127.0.0.1", "::1"])
    expired = pki.make_leaf("api.test", inter, san_dns=sans, not_before=d(2010), not_after=d(2015))
    self_signed = pki.make_leaf("api.test", None, san_dns=sans)
    constrained = pki.build_cert("pinproxy fuzz constrained", issuer=root, is_ca=True,
                                 name_constraints={"permitted_dns": ["example.com"]})
    stranger_root = pki.make_root("pinproxy fuzz stranger")
    stranger_leaf = pki.make_leaf("api.test", stranger_root, san_dns=sans)
    crl = pki.make_crl(inter, [revoked.serial], d(2020), d(2045))

    pki.write_pem(DATA / "root.pem", root.cert)
    pki.write_pem(DATA / "int.pem", inter.cert)
    pki.write_pem(DATA / "chain.pem", leaf.cert, inter.cert)
    pki.write_der(DATA / "leaf.der", leaf.cert)
    pki.write_der(DATA / "revoked.der", revoked.cert)
    pki.write_pem(DATA / "int.crl.pem", crl)
    pin = pki.spki_pin(leaf.cert)
    backup = pki.spki_pin(other_key.cert)
    configs = {
        "anchors": 'trust = ["root.pem"]\n',
        "pinned": f'trust = ["root.pem"]\npin = "public-key"\npins = ["{pin}", "{backup}"]\n',
        "none": f'trust = "none"\npin = "public-key"\npins = ["{pin}", "{backup}"]\n',
        "crl": 'trust = ["root.pem"]\nrevocation = "crl"\ncrls = ["int.crl.pem"]\n',
    }
    for name, keys in configs.items():
        text = f'[default]\naction = "deny"\n\n[hosts."api.test"]\n{keys}'
        (DATA / f"verdict-{name}.toml").write_text(text)
        seed("config", text.encode())

    # connect: request heads, good and bad
    for head in [
        "CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\n",
        "CONNECT API.Test.:443 HTTP/1.0\r\n\r\n",
        "CONNECT 127.0.0.1:8443 HTTP/1.1\r\nHost: 127.0.0.1:8443\r\nProxy-Connection: keep-alive\r\n\r\n",
        "CONNECT [::1]:443 HTTP/1.1\r\n\r\n",
        "CONNECT [::ffff:192.0.2.1]:443 HTTP/1.1\r\n\r\n",
        "CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\n\r\n",
        "CONNECT xn--bcher-kva.example:443 HTTP/1.1\r\nUser-Agent: curl/8.0\r\n\r\n",
        "CONNECT a-b.c-d.example:65535 HTTP/1.1\n\n",
        "GET http://api.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n",
        "CONNECT api.test:0 HTTP/1.1\r\n\r\n",
        "CONNECT api.test HTTP/1.1\r\n\r\n",
        "CONNECT  api.test:443 HTTP/1.1\r\n\r\n",
        "CONNECT api.test:443 HTTP/2.0\r\n\r\n",
        "CONNECT api.test:443 HTTP/1.1\r\nno colon here\r\n\r\n",
        "CONNECT 1.2.3:443 HTTP/1.1\r\n\r\n",
        "CONNECT 0x7f.1:443 HTTP/1.1\r\n\r\n",
        "CONNECT " + "a" * 63 + "." + "b" * 63 + ".test:443 HTTP/1.1\r\n\r\n",
        "connect api.test:443 HTTP/1.1\r\n\r\n",
    ]:
        seed("connect", head.encode())

    # config: the reference config and small ones using every key
    seed("config", (REPO / "config" / "pinproxy.toml").read_bytes())
    seed("config", b"")
    seed("config", f"""[proxy]
listen = ["127.0.0.1:3128", "[::1]:3128"]
allow_ports = [443, 8443]
block_private_destinations = false
request_timeout = 5
idle_timeout = 60.5
log_format = "json"
metrics_listen = "127.0.0.1:9128"

[resolve]
"api.test" = "127.0.0.1"
"v6.test" = ["::1", "127.0.0.2"]

[default]
action = "verify"
trust = "system"

[hosts."api.test"]
pin = "certificate"
certificates = ["chain.pem"]
trust = "pinned"
expires = 2030-01-01
min_tls = "1.3"
ports = [443]

[hosts."*.wild.test"]
trust = ["root.pem", "int.pem"]
pin = "public-key"
pins = ["{pin}", "{backup}"]
enforce = false
include_subdomains = false

[hosts."sub.test"]
include_subdomains = true
validate_host = false
pin = "public-key"
pins = ["{pin}"]
revocation = "ocsp-staple"

[hosts."127.0.0.1"]
action = "allow-insecure"

[hosts."::1"]
action = "deny"
""".encode())
    seed("config", b'[hosts."x.test"]\npins = { a = 1 }\n[hosts."x.test"]\nmode = "tunnel"\n')
    seed("config", b"hosts.'a.test'.trust = 'none'\nhosts.'a.test'.pin = 'public-key'\n")
    seed("config", b'[hosts]\n"a.test" = { trust = ["root.pem"], crls = ["int.crl.pem"], revocation = "crl" }\n')

    # certificates: PEM and DER certificates and CRLs, bundles
    for c in (leaf, rsa_leaf, ip_leaf, wildcard, constrained, self_signed, expired):
        seed("certificates", pki.to_der(c.cert))
    seed("certificates", pki.to_pem(leaf.cert, inter.cert, root.cert))
    seed("certificates", pki.to_pem(rsa_leaf.cert))
    seed("certificates", pki.to_der(crl))
    seed("certificates", pki.to_pem(crl, pki.make_crl(root, [], d(2020), d(2045))))

    # verdict: chains in every shape the policies meet
    for chain in [
        (leaf, inter), (leaf, inter, root), (leaf,), (revoked, inter), (other_key, inter),
        (rsa_leaf, inter), (wrong_name, inter), (wildcard, inter), (expired, inter),
        (self_signed,), (stranger_leaf, stranger_root), (inter, leaf), (leaf, constrained, inter),
        (ip_leaf, inter), (leaf, inter, inter, root),
    ]:
        seed("verdict", frame(*chain))
    http2_seeds()
    cgroups_seeds()
    ct_seeds()
    return 0


def cgroups_seeds() -> None:
    """cgroups: paths (NUL between them) laid out as a systemd host's hierarchy, with the names
    a delegated unit may choose below its service."""
    deep = "/".join(f"level{i}" for i in range(1, 13))
    seed("cgroups", f"/system.slice/ci-runner.service/{deep}".encode())
    seed("cgroups", b"\0".join([b"/system.slice/system-getty.slice/getty@tty1.service/payload"]
                               + [f"/system.slice/job{i}.service/a/b/c/d/e/f/g".encode() for i in range(8)]))
    seed("cgroups", b"\0".join([b"/user.slice/user-1000.slice/user@1000.service/app.slice/evil.service",
                               b"/user.slice/user-1000.slice/session-2.scope", b"/init.scope",
                               b"/system.slice/docker-0123.scope/sub", b"/system.slice/x.slice/y.slice/z.service"]))
    seed("cgroups", b"\0".join([b"/system.slice/ci.service/\xff\xfe/\n/ /-/.hidden/..../a.service",
                               b"/system.slice/\xff.slice/a.service", b"/system.slice/@.service", b"/system.slice/a b.service",
                               b"/system.slice/" + b"n" * 247 + b".service/x"]))


def ct_seeds() -> None:
    """ctloglist: log lists in the format of Chrome's log_list.json v3 (ct_pki writes them), and
    a TLS-encoded SCT list."""
    import datetime as dt

    import ct_pki

    logs = [ct_pki.Log("A one", "Operator A"), ct_pki.Log("A two", "Operator A"),
            ct_pki.Log("B one", "Operator B", state="retired"), ct_pki.Log("C one", "Operator C", state="qualified")]
    published = dt.datetime(2026, 5, 1, tzinfo=dt.timezone.utc)
    seed("ctloglist", ct_pki.log_list(logs, published).encode())
    seed("ctloglist", ct_pki.log_list(logs[:1], published).encode())
    leaf = pki.make_leaf("api.test", pki.make_root("pinproxy fuzz ct root"))
    seed("ctloglist", ct_pki.tls_scts(leaf, [ct_pki.SCTSpec(logs[0]), ct_pki.SCTSpec(logs[2])]))


def http2_seeds() -> None:
    """http2: what a client sends an in-TLS refusal over h2 (the `h2` package writes the
    frames and HPACK), each after the byte that sets the size of the pieces it arrives in."""
    import h2.config
    import h2.connection

    def client(*requests) -> bytes:
        c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        c.initiate_connection()
        for stream, headers, body in requests:
            c.send_headers(stream, headers, end_stream=body is None)
            if body is not None:
                c.send_data(stream, body, end_stream=True)
        return c.data_to_send()

    base = [(":scheme", "https"), (":authority", "api.test:443")]
    get = base + [(":method", "GET"), (":path", "/"), ("user-agent", "curl/7.88.1"), ("accept", "*/*")]
    head = base + [(":method", "HEAD"), (":path", "/")]
    grpc = base + [(":method", "POST"), (":path", "/pinproxy.Test/Echo"), ("content-type", "application/grpc"),
                   ("te", "trailers"), ("grpc-timeout", "20S")]
    seed("http2", b"\xff" + client((1, get, None)))
    seed("http2", b"\x07" + client((1, head, None)))
    seed("http2", b"\x40" + client((1, grpc, b"\x00\x00\x00\x00\x04ping")))
    seed("http2", b"\x01" + client((1, get, None), (3, get, None)))


if __name__ == "__main__":
    # `make-seeds.py http2` (or `cgroups`, `ctloglist`) writes those seeds alone (the others need fresh keys).
    only = {"http2": http2_seeds, "cgroups": cgroups_seeds, "ctloglist": ct_seeds}.get(sys.argv[1] if sys.argv[1:] else "")
    sys.exit(only() if only else main())
