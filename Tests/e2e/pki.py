#!/usr/bin/env python3
"""Test PKI for pinproxy: certificates, CRLs and OCSP responses.

Library: small builders on top of ``cryptography.x509`` (no hand-written
ASN.1).  Command line: ``python3 Tests/e2e/pki.py OUTDIR`` writes the standard
set described in Tests/e2e/README.md into OUTDIR.

Everything is deterministic in structure (names, SANs, dates, which key is
shared with which); keys and serial numbers are random on every run.
"""

from __future__ import annotations

import argparse
import base64
import datetime as _dt
import hashlib
import ipaddress
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence, Union

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509 import ocsp
from cryptography.x509.oid import AuthorityInformationAccessOID, ExtendedKeyUsageOID, NameOID

UTC = _dt.timezone.utc

#: Validity used when none is given.
DEFAULT_NOT_BEFORE = _dt.datetime(2020, 1, 1, tzinfo=UTC)
DEFAULT_NOT_AFTER = _dt.datetime(2045, 1, 1, tzinfo=UTC)
#: The fixed instant the tests evaluate at.
EVAL_TIME = _dt.datetime(2026, 6, 1, tzinfo=UTC)
EVAL_TIME_RFC3339 = "2026-06-01T00:00:00Z"

PrivateKey = Union[ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey]
KeySpec = Union[str, PrivateKey]  # "ec" | "rsa" | an existing key

EKU_NAMES = {
    "serverAuth": ExtendedKeyUsageOID.SERVER_AUTH,
    "clientAuth": ExtendedKeyUsageOID.CLIENT_AUTH,
    "codeSigning": ExtendedKeyUsageOID.CODE_SIGNING,
    "emailProtection": ExtendedKeyUsageOID.EMAIL_PROTECTION,
    "OCSPSigning": ExtendedKeyUsageOID.OCSP_SIGNING,
    "timeStamping": ExtendedKeyUsageOID.TIME_STAMPING,
}

KEY_USAGE_NAMES = (
    "digital_signature",
    "content_commitment",
    "key_encipherment",
    "data_encipherment",
    "key_agreement",
    "key_cert_sign",
    "crl_sign",
    "encipher_only",
    "decipher_only",
)


# --------------------------------------------------------------------------
# keys, pins, encodings


def new_key(kind: KeySpec = "ec") -> PrivateKey:
    """A fresh ECDSA P-256 ("ec") or RSA-2048 ("rsa") key; a key object is returned as is."""
    if not isinstance(kind, str):
        return kind
    if kind == "ec":
        return ec.generate_private_key(ec.SECP256R1())
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    raise ValueError(f"unknown key kind {kind!r} (want 'ec' or 'rsa')")


def _b64_sha256(data: bytes) -> str:
    return "sha256/" + base64.b64encode(hashlib.sha256(data).digest()).decode("ascii")


def spki_der(cert: x509.Certificate) -> bytes:
    return cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def spki_pin(cert: x509.Certificate) -> str:
    """``sha256/`` + base64(SHA-256(DER SubjectPublicKeyInfo))."""
    return _b64_sha256(spki_der(cert))


def cert_pin(cert: x509.Certificate) -> str:
    """``sha256/`` + base64(SHA-256(certificate DER))."""
    return _b64_sha256(cert.public_bytes(serialization.Encoding.DER))


def key_pem(key: PrivateKey) -> bytes:
    """Unencrypted PKCS#8 PEM."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def to_pem(*objs) -> bytes:
    """PEM of certificates and/or CRLs, concatenated in order."""
    return b"".join(o.public_bytes(serialization.Encoding.PEM) for o in objs)


def to_der(obj) -> bytes:
    return obj.public_bytes(serialization.Encoding.DER)


def write_pem(path: os.PathLike | str, *objs) -> Path:
    path = Path(path)
    path.write_bytes(to_pem(*objs))
    return path


def write_der(path: os.PathLike | str, obj) -> Path:
    path = Path(path)
    path.write_bytes(to_der(obj))
    return path


def write_key(path: os.PathLike | str, key: PrivateKey) -> Path:
    path = Path(path)
    path.write_bytes(key_pem(key))
    return path


def load_certs(path: os.PathLike | str) -> list[x509.Certificate]:
    """Every certificate in a PEM bundle, or the single certificate of a DER file."""
    data = Path(path).read_bytes()
    if b"-----BEGIN" in data:
        return x509.load_pem_x509_certificates(data)
    return [x509.load_der_x509_certificate(data)]


# --------------------------------------------------------------------------
# certificates


@dataclass
class Issued:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: PrivateKey

    @property
    def pem(self) -> bytes:
        return to_pem(self.cert)

    @property
    def der(self) -> bytes:
        return to_der(self.cert)

    @property
    def spki_pin(self) -> str:
        return spki_pin(self.cert)

    @property
    def cert_pin(self) -> str:
        return cert_pin(self.cert)

    @property
    def serial(self) -> int:
        return self.cert.serial_number

    def write(self, directory: os.PathLike | str, stem: str, *chain: "Issued") -> None:
        """Write STEM.pem, STEM.key and, when CHAIN is given, STEM-chain.pem (self + chain)."""
        directory = Path(directory)
        write_pem(directory / f"{stem}.pem", self.cert)
        write_key(directory / f"{stem}.key", self.key)
        if chain:
            write_pem(directory / f"{stem}-chain.pem", self.cert, *(c.cert for c in chain))


def _name(cn: str | None, extra: Sequence[tuple] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pinproxy tests")]
    for oid, value in extra:
        attrs.append(x509.NameAttribute(oid, value))
    if cn is not None:
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _key_usage(spec: Iterable[str]) -> x509.KeyUsage:
    spec = set(spec)
    unknown = spec - set(KEY_USAGE_NAMES)
    if unknown:
        raise ValueError(f"unknown key usage(s): {sorted(unknown)}")
    return x509.KeyUsage(**{n: (n in spec) for n in KEY_USAGE_NAMES})


def _eku(spec: Iterable) -> x509.ExtendedKeyUsage:
    oids = []
    for item in spec:
        oids.append(EKU_NAMES[item] if isinstance(item, str) else item)
    return x509.ExtendedKeyUsage(oids)


def _general_names(dns: Iterable[str] = (), ips: Iterable[str] = ()) -> list:
    names: list = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    return names


def build_cert(
    cn: str | None,
    *,
    issuer: Issued | None = None,
    key: KeySpec = "ec",
    subject: x509.Name | None = None,
    san_dns: Sequence[str] | None = None,
    san_ips: Sequence[str] = (),
    include_san: bool = True,
    not_before: _dt.datetime = DEFAULT_NOT_BEFORE,
    not_after: _dt.datetime = DEFAULT_NOT_AFTER,
    is_ca: bool = False,
    path_length: int | None = None,
    basic_constraints: bool = True,
    key_usage: Iterable[str] | None | bool = None,
    eku: Iterable | None | bool = None,
    name_constraints: dict | None = None,
    serial: int | None = None,
    ca_issuers: Sequence[str] = (),
) -> Issued:
    """Build one certificate.

    cn            subject CN (the subject is O=pinproxy tests, CN=cn unless ``subject`` is given)
    issuer        the issuing Issued; None = self-signed with ``key``
    key           "ec" (P-256), "rsa" (RSA-2048) or an existing private key (reuse)
    san_dns       SAN DNS names; None = [cn] for leaves, none for CAs
    san_ips       SAN IP addresses (strings, v4 or v6)
    include_san   False = no subjectAltName extension at all
    is_ca, path_length, basic_constraints (False = omit the extension)
    key_usage     names from KEY_USAGE_NAMES; None = sensible default; False = omit
    eku           e.g. ["serverAuth"]; None = serverAuth for leaves, omitted for CAs; False = omit
    name_constraints  {"permitted_dns": [...], "excluded_dns": [...],
                       "permitted_ips": ["10.0.0.0/8"], "excluded_ips": [...]}
    ca_issuers    URLs for an authorityInfoAccess extension (caIssuers: where the issuer is served)
    """
    private_key = new_key(key)
    public_key = private_key.public_key()
    subject_name = subject if subject is not None else _name(cn)
    if issuer is None:
        issuer_name, signing_key, issuer_pub = subject_name, private_key, public_key
    else:
        issuer_name, signing_key = issuer.cert.subject, issuer.key
        issuer_pub = issuer.cert.public_key()

    b = (
        x509.CertificateBuilder()
        .subject_name(subject_name)
        .issuer_name(issuer_name)
        .public_key(public_key)
        .serial_number(serial if serial is not None else x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
    )
    if basic_constraints:
        b = b.add_extension(
            x509.BasicConstraints(ca=is_ca, path_length=path_length if is_ca else None),
            critical=True,
        )
    if key_usage is None:
        if is_ca:
            key_usage = ["digital_signature", "key_cert_sign", "crl_sign"]
        elif issuer is None:
            # Self-signed end-entity: no keyUsage, so OpenSSL still treats it as self-signed.
            key_usage = False
        elif isinstance(private_key, rsa.RSAPrivateKey):
            key_usage = ["digital_signature", "key_encipherment"]
        else:
            key_usage = ["digital_signature"]
    if key_usage is not False:
        b = b.add_extension(_key_usage(key_usage), critical=True)
    if eku is None:
        eku = False if is_ca else ["serverAuth"]
    if eku is not False:
        b = b.add_extension(_eku(eku), critical=False)
    if include_san:
        dns = list(san_dns) if san_dns is not None else ([] if is_ca or cn is None else [cn])
        names = _general_names(dns, san_ips)
        if names:
            b = b.add_extension(x509.SubjectAlternativeName(names), critical=False)
    if name_constraints:
        permitted = [x509.DNSName(d) for d in name_constraints.get("permitted_dns", [])]
        permitted += [
            x509.IPAddress(ipaddress.ip_network(n)) for n in name_constraints.get("permitted_ips", [])
        ]
        excluded = [x509.DNSName(d) for d in name_constraints.get("excluded_dns", [])]
        excluded += [
            x509.IPAddress(ipaddress.ip_network(n)) for n in name_constraints.get("excluded_ips", [])
        ]
        b = b.add_extension(
            x509.NameConstraints(permitted_subtrees=permitted or None, excluded_subtrees=excluded or None),
            critical=True,
        )
    if ca_issuers:
        b = b.add_extension(
            x509.AuthorityInformationAccess(
                [x509.AccessDescription(AuthorityInformationAccessOID.CA_ISSUERS, x509.UniformResourceIdentifier(u))
                 for u in ca_issuers]
            ),
            critical=False,
        )
    b = b.add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    b = b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_pub), critical=False)
    cert = b.sign(signing_key, hashes.SHA256())
    return Issued(cert, private_key)


def make_root(cn: str, key: KeySpec = "ec", path_length: int | None = None, **kw) -> Issued:
    """A self-signed CA."""
    return build_cert(cn, key=key, is_ca=True, path_length=path_length, **kw)


def make_intermediate(
    cn: str, issuer: Issued, key: KeySpec = "ec", path_length: int | None = None, **kw
) -> Issued:
    """A CA certificate issued by ``issuer``."""
    return build_cert(cn, issuer=issuer, key=key, is_ca=True, path_length=path_length, **kw)


def make_leaf(
    cn: str | None,
    issuer: Issued | None,
    key: KeySpec = "ec",
    san_dns: Sequence[str] | None = None,
    san_ips: Sequence[str] = (),
    **kw,
) -> Issued:
    """An end-entity certificate (CA:FALSE, EKU serverAuth unless told); issuer None = self-signed."""
    return build_cert(cn, issuer=issuer, key=key, san_dns=san_dns, san_ips=san_ips, **kw)


# --------------------------------------------------------------------------
# CRLs and OCSP


def make_crl(
    issuer: Issued,
    revoked: Iterable[int | tuple[int, _dt.datetime]] = (),
    last_update: _dt.datetime = DEFAULT_NOT_BEFORE,
    next_update: _dt.datetime = DEFAULT_NOT_AFTER,
    crl_number: int = 1,
) -> x509.CertificateRevocationList:
    """A CRL signed by ``issuer``; ``revoked`` holds serials or (serial, revocation date)."""
    b = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(issuer.cert.subject)
        .last_update(last_update)
        .next_update(next_update)
    )
    for item in revoked:
        serial, when = item if isinstance(item, tuple) else (item, last_update)
        b = b.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(when).build()
        )
    b = b.add_extension(x509.CRLNumber(crl_number), critical=False)
    b = b.add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.cert.public_key()), critical=False
    )
    return b.sign(issuer.key, hashes.SHA256())


def make_ocsp(
    cert: x509.Certificate | Issued,
    issuer: Issued,
    status: str = "good",
    this_update: _dt.datetime = EVAL_TIME - _dt.timedelta(days=31),
    next_update: _dt.datetime | None = EVAL_TIME + _dt.timedelta(days=30),
    revocation_time: _dt.datetime = _dt.datetime(2025, 6, 1, tzinfo=UTC),
    signer: Issued | None = None,
    include_signer_cert: bool = False,
) -> ocsp.OCSPResponse:
    """A successful basic OCSP response for ``cert`` (status "good" | "revoked" | "unknown").

    Signed by ``signer`` (default: the issuer itself, which RFC 6960 allows without
    a delegated responder certificate).
    """
    if isinstance(cert, Issued):
        cert = cert.cert
    signer = signer or issuer
    st = {
        "good": ocsp.OCSPCertStatus.GOOD,
        "revoked": ocsp.OCSPCertStatus.REVOKED,
        "unknown": ocsp.OCSPCertStatus.UNKNOWN,
    }[status]
    b = ocsp.OCSPResponseBuilder().add_response(
        cert=cert,
        issuer=issuer.cert,
        algorithm=hashes.SHA1(),
        cert_status=st,
        this_update=this_update,
        next_update=next_update,
        revocation_time=revocation_time if status == "revoked" else None,
        revocation_reason=x509.ReasonFlags.key_compromise if status == "revoked" else None,
    )
    b = b.responder_id(ocsp.OCSPResponderEncoding.HASH, signer.cert)
    if include_signer_cert:
        b = b.certificates([signer.cert])
    return b.sign(signer.key, hashes.SHA256())


# --------------------------------------------------------------------------
# the standard set

ROOT_A_CN = "pinproxy test root A"
ROOT_B_CN = "pinproxy test root B"
INT_A_CN = "pinproxy test intermediate A"
INT_B_CN = "pinproxy test intermediate B"
INT_PATHLEN0_CN = "pinproxy test intermediate pathlen0"
INT_SUB_CN = "pinproxy test intermediate sub"

API_SANS = ["api.test", "www.api.test"]


def _d(y: int, m: int = 1, d: int = 1) -> _dt.datetime:
    return _dt.datetime(y, m, d, tzinfo=UTC)


def build_standard_set(outdir: os.PathLike | str) -> dict[str, Issued]:
    """Write the standard set into OUTDIR (created); return {stem: Issued} for every certificate."""
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    certs: dict[str, Issued] = {}

    def put(stem: str, issued: Issued, *chain: Issued) -> Issued:
        issued.write(out, stem, *chain)
        certs[stem] = issued
        return issued

    root_a = put("root-a", make_root(ROOT_A_CN, "ec"))
    root_b = put("root-b", make_root(ROOT_B_CN, "rsa"))
    int_a = put("int-a", make_intermediate(INT_A_CN, root_a))
    int_b = put("int-b", make_intermediate(INT_B_CN, root_b))

    api = put("api", make_leaf("api.test", int_a, san_dns=API_SANS), int_a)
    write_der(out / "api.der", api.cert)
    write_pem(out / "api-fullchain.pem", api.cert, int_a.cert, root_a.cert)

    put("api-rsa", make_leaf("api.test", int_a, key="rsa", san_dns=API_SANS), int_a)

    rotated = make_leaf("api.test", int_a, key=api.key, san_dns=API_SANS)
    while rotated.serial == api.serial:  # astronomically unlikely, but the contract says different
        rotated = make_leaf("api.test", int_a, key=api.key, san_dns=API_SANS)
    write_pem(out / "api-rotated.pem", rotated.cert)
    write_pem(out / "api-rotated-chain.pem", rotated.cert, int_a.cert)
    certs["api-rotated"] = rotated

    put("api-newkey", make_leaf("api.test", int_a, san_dns=API_SANS), int_a)
    put("wild", make_leaf("*.wild.test", int_a, san_dns=["*.wild.test"]), int_a)
    put("ip", make_leaf("127.0.0.1", int_a, san_dns=[], san_ips=["127.0.0.1", "::1"]), int_a)
    put("other", make_leaf("other.test", int_a, san_dns=["other.test"]), int_a)
    put(
        "expired",
        make_leaf("api.test", int_a, san_dns=API_SANS, not_before=_d(2010), not_after=_d(2015)),
        int_a,
    )
    put(
        "notyet",
        make_leaf("api.test", int_a, san_dns=API_SANS, not_before=_d(2090), not_after=_d(2095)),
        int_a,
    )
    put("cn-only", make_leaf("api.test", int_a, include_san=False), int_a)
    put("client-only", make_leaf("api.test", int_a, san_dns=API_SANS, eku=["clientAuth"]), int_a)

    self_ = put("self", make_leaf("self.test", None, san_dns=["self.test"], san_ips=["127.0.0.1"]))
    rekeyed = make_leaf(
        "self.test",
        None,
        key=self_.key,
        san_dns=["self.test"],
        san_ips=["127.0.0.1"],
        not_before=_d(2021),
        not_after=_d(2044),
    )
    write_pem(out / "self-rekeyed.pem", rekeyed.cert)
    certs["self-rekeyed"] = rekeyed
    # What a man in the middle serves: self-signed, expired, for another name.
    put("expired-selfsigned", make_leaf("mitm.test", None, san_dns=["mitm.test"], not_before=_d(2010), not_after=_d(2015)))

    untrusted = put("untrusted", make_leaf("api.test", int_b, san_dns=API_SANS), int_b)
    write_pem(out / "mixed-chain.pem", untrusted.cert, int_a.cert)
    # Extra (not in the brief's list): the mixed chain plus int-b, so it *can* be built to root-b.
    write_pem(out / "mixed-chain-full.pem", untrusted.cert, int_a.cert, int_b.cert)

    revoked = put("revoked", make_leaf("api.test", int_a, san_dns=API_SANS), int_a)
    crl = make_crl(int_a, [(revoked.serial, _d(2025, 6, 1))], _d(2020), _d(2045))
    write_pem(out / "crl-int-a.pem", crl)
    write_der(out / "crl-int-a.der", crl)
    write_pem(
        out / "crl-int-a-stale.pem",
        make_crl(int_a, [(revoked.serial, _d(2020, 6, 1))], _d(2020), _d(2021)),
    )
    write_pem(out / "crl-root-b.pem", make_crl(root_b, [], _d(2020), _d(2045)))

    p0 = put("int-pathlen0", make_intermediate(INT_PATHLEN0_CN, root_a, path_length=0))
    sub = put("int-sub", make_intermediate(INT_SUB_CN, p0))
    put("deep", make_leaf("api.test", sub, san_dns=API_SANS), sub, p0)

    (out / "ocsp-api-good.der").write_bytes(
        to_der(make_ocsp(api, int_a, "good", _d(2026, 5, 1), _d(2026, 7, 1)))
    )
    (out / "ocsp-api-stale.der").write_bytes(
        to_der(make_ocsp(api, int_a, "good", _d(2025, 1, 1), _d(2025, 2, 1)))
    )
    (out / "ocsp-revoked.der").write_bytes(
        to_der(make_ocsp(revoked, int_a, "revoked", _d(2026, 5, 1), _d(2026, 7, 1)))
    )

    (out / "anchors").mkdir(exist_ok=True)
    write_pem(out / "anchors" / "root-a.pem", root_a.cert)
    (out / "anchors-mixed").mkdir(exist_ok=True)
    write_pem(out / "anchors-mixed" / "root-a.crt", root_a.cert)
    write_der(out / "anchors-mixed" / "root-b.DER", root_b.cert)

    pins = {stem: {"spki": i.spki_pin, "cert": i.cert_pin} for stem, i in sorted(certs.items())}
    (out / "pins.json").write_text(json.dumps(pins, indent=2, sort_keys=True) + "\n")
    return certs


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write pinproxy's standard test PKI into OUTDIR.")
    ap.add_argument("outdir", help="directory to write (created if missing)")
    args = ap.parse_args(argv)
    build_standard_set(args.outdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
