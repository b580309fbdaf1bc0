"""Certificates for WebPKIRuleTests that the standard test PKI does not hold.

Usage: python3 rule-fixtures.py OUTDIR  (Tests/e2e must be importable: it uses pki.py)
"""
import datetime as dt
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))
import pki  # noqa: E402
from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes  # noqa: E402
from cryptography.x509.oid import ExtensionOID, NameOID  # noqa: E402

UTC = dt.timezone.utc
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)

root = pki.make_root("Rules Root")
ca = pki.make_intermediate("Rules CA", root)
pki.write_pem(out / "rules-root.pem", root.cert)


def leaf(stem, cn, sans, issuer=ca, chain=(ca,), **kw):
    issued = pki.make_leaf(cn, issuer, san_dns=sans, **kw)
    pki.write_pem(out / f"{stem}.pem", issued.cert, *(c.cert for c in chain))


leaf("rules-good", "api.test", ["api.test"])
leaf("rules-no-eku", "api.test", ["api.test"], eku=False)
leaf("rules-cn-elsewhere", "My Service", ["api.test"])
leaf("rules-public-suffix-wildcard", "*.co.uk", ["*.co.uk"])
leaf("rules-boundary", "api.test", ["api.test"], not_after=dt.datetime(2030, 1, 1, tzinfo=UTC))

# A CA certificate as the leaf, with pathLen 0, under an intermediate with pathLen 0: RFC 5280
# 4.2.1.9 does not count the leaf, so its pathLen is ignored.
pathlen0 = pki.make_intermediate("Rules CA pathlen 0", root, path_length=0)
leaf("rules-ca-leaf", "api.test", ["api.test"], issuer=pathlen0, chain=(pathlen0,), is_ca=True, path_length=0,
     key_usage=["digital_signature", "key_cert_sign"], eku=["serverAuth"])

# An intermediate whose basicConstraints is not critical (RFC 5280 4.2.1.9 says it must be).
ca_key = pki.new_key("ec")
lax_ca = pki.Issued(
    x509.CertificateBuilder()
    .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Rules Lax CA")]))
    .issuer_name(root.cert.subject)
    .public_key(ca_key.public_key())
    .serial_number(x509.random_serial_number())
    .not_valid_before(dt.datetime(2020, 1, 1, tzinfo=UTC))
    .not_valid_after(dt.datetime(2045, 1, 1, tzinfo=UTC))
    .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=False)
    .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
    .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(root.cert.public_key()), critical=False)
    .sign(root.key, hashes.SHA256()),
    ca_key,
)
leaf("rules-lax-ca", "api.test", ["api.test"], issuer=lax_ca, chain=(lax_ca,))

# A bare self-signed server, as appliances and old `openssl req -x509` make them: cA = TRUE, no
# key identifiers, no keyUsage or extendedKeyUsage, a CN that is not the SAN.
key = pki.new_key("ec")
name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "My Appliance")])
bare = (
    x509.CertificateBuilder()
    .subject_name(name)
    .issuer_name(name)
    .public_key(key.public_key())
    .serial_number(x509.random_serial_number())
    .not_valid_before(dt.datetime(2020, 1, 1, tzinfo=UTC))
    .not_valid_after(dt.datetime(2045, 1, 1, tzinfo=UTC))
    .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    .add_extension(x509.SubjectAlternativeName([x509.DNSName("api.test")]), critical=False)
    .sign(key, hashes.SHA256())
)
pki.write_pem(out / "rules-bare-self.pem", bare)

# CAs for nameConstraintsPermit: one that permits only api.test, one whose nameConstraints is
# not a NameConstraints at all (a SEQUENCE holding an OCTET STRING), which OpenSSL cannot decode.
nc_api = pki.make_intermediate("Rules NC CA", root, name_constraints={"permitted_dns": ["api.test"]})
pki.write_pem(out / "rules-nc-api-ca.pem", nc_api.cert)
nc_key = pki.new_key("ec")
malformed_nc = (
    x509.CertificateBuilder()
    .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Rules Malformed NC CA")]))
    .issuer_name(root.cert.subject)
    .public_key(nc_key.public_key())
    .serial_number(x509.random_serial_number())
    .not_valid_before(dt.datetime(2020, 1, 1, tzinfo=UTC))
    .not_valid_after(dt.datetime(2045, 1, 1, tzinfo=UTC))
    .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    .add_extension(x509.UnrecognizedExtension(ExtensionOID.NAME_CONSTRAINTS, b"\x30\x03\x04\x01\x00"), critical=True)
    .sign(root.key, hashes.SHA256())
)
pki.write_pem(out / "rules-nc-malformed-ca.pem", malformed_nc)
