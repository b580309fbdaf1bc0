"""`pinproxy run`: the local CA is limited to TLS servers (extendedKeyUsage serverAuth).

- A CA made by the daemon carries `extendedKeyUsage = serverAuth`, and leaves it mints still
  verify for curl and Python's ssl module.
- A CA without the extension (made by an older pinproxy) is kept, since every client trusts
  it, and the daemon logs once at start how to replace it (`pinproxy ca` says it on stderr).
"""

from __future__ import annotations

import os
import subprocess

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

import origin as originlib
from proxy_harness import (
    API,
    TIMEOUT,
    curl,  # noqa: F401 (fixture)
    https_get,
    make_proxy,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    pinned_entry,
    run_curl,
)


def test_a_new_ca_is_limited_to_tls_servers_and_its_leaves_verify(make_proxy, origins, pki, curl):
    p = make_proxy(proxy={"allow_ports": [origins.api.port]}, hosts={API: pinned_entry(pki, "api", "int-a")})
    ca = x509.load_pem_x509_certificate(p.ca_path.read_bytes())
    eku = ca.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH], eku
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca

    r = run_curl(curl, p, f"https://{API}:{origins.api.port}/small")
    assert r.exit == 0 and (r.connect_code, r.http_code) == (200, 200), r
    assert r.body == originlib.SMALL_BODY
    status, body, _, _ = https_get(p, API, origins.api.port, "/small")  # ssl.create_default_context(cafile=CA)
    assert (status, body) == (200, originlib.SMALL_BODY)
    assert not [l for l in p.logs() if l.get("event") == "local-ca"], "a new CA needs no warning"


def test_a_ca_without_eku_is_kept_with_a_warning(make_proxy, origins, pki, tmp_path):
    ca_dir = tmp_path / "old-ca"
    ca_dir.mkdir(mode=0o700)
    made = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", str(ca_dir / "ca.key"), "-out", str(ca_dir / "ca.pem"), "-days", "30",
         "-subj", "/CN=pinproxy local CA (older)",
         "-addext", "basicConstraints=critical,CA:TRUE,pathlen:0", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        capture_output=True, text=True, timeout=TIMEOUT)
    assert made.returncode == 0, made.stderr
    os.chmod(ca_dir / "ca.key", 0o600)
    before = (ca_dir / "ca.pem").read_bytes()

    p = make_proxy(proxy={"allow_ports": [origins.api.port], "ca_dir": str(ca_dir)},
                   hosts={API: pinned_entry(pki, "api", "int-a")})
    warning = p.wait_for_log(lambda l: l.get("event") == "local-ca", what="the local-ca warning")
    assert warning.get("level") == "warning", warning.raw
    assert "extendedKeyUsage" in warning["detail"] and "delete ca.pem and ca.key" in warning["detail"], warning.raw
    assert (ca_dir / "ca.pem").read_bytes() == before, "the CA clients trust must be kept"

    status, body, _, _ = https_get(p, API, origins.api.port, "/small", ctx=p.client_context())
    assert (status, body) == (200, originlib.SMALL_BODY)

    ca = subprocess.run([str(p.bin), "ca", "--config", str(p.config_path)], cwd=p.dir,
                        capture_output=True, text=True, timeout=TIMEOUT)
    assert ca.returncode == 0 and ca.stdout.startswith(str(ca_dir / "ca.pem")), ca
    assert "warning" in ca.stderr and "extendedKeyUsage" in ca.stderr, ca.stderr
