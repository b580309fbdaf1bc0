"""Certificate Transparency material for the tests: test logs (ECDSA P-256 keys of a few
operators), a log list in the format of Chrome's log_list.json v3, and SCTs signed per RFC 6962:
embedded in a certificate, for the TLS extension, and in a stapled OCSP response.

No public log is reachable here, so the logs are ours. An embedded SCT signs the
precertificate entry: the issuer's key hash and the TBSCertificate as the final certificate
has it without its SCT list extension (which is the precertificate's TBS without its poison
extension, RFC 6962 section 3.2); a TLS-extension or OCSP SCT signs the final certificate itself.

`cryptography` writes no extension of an OCSP SingleResponse, so `ocsp_staple` has it build and
sign the response, then adds the SCT list to the SingleResponse with pyasn1 (RFC 6960's types,
declared below) and signs the new ResponseData again with the responder's key.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509 import ocsp
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from pyasn1.codec.der import decoder as der_decoder, encoder as der_encoder
from pyasn1.type import namedtype, tag, univ, useful

import pki as pkilib

UTC = dt.timezone.utc
SCT_LIST_OID = x509.ObjectIdentifier("1.3.6.1.4.1.11129.2.4.2")
#: The SCT list of an OCSP SingleResponse (RFC 6962 section 3.3).
OCSP_SCT_LIST_OID = "1.3.6.1.4.1.11129.2.4.5"


@dataclass
class Log:
    """One test log: its key, operator, and state in the list."""
    description: str
    operator: str
    state: str = "usable"
    state_since: dt.datetime = field(default_factory=lambda: now() - dt.timedelta(days=400))
    key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))

    @property
    def spki(self) -> bytes:
        return self.key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)

    @property
    def log_id(self) -> bytes:
        return hashlib.sha256(self.spki).digest()


def now() -> dt.datetime:
    return dt.datetime.now(UTC).replace(microsecond=0)


def rfc3339(t: dt.datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def log_list(logs: Sequence[Log], published: dt.datetime | None = None) -> str:
    """The logs as Chrome's log_list.json v3: each operator's logs, the second of each
    operator's logs listed under tiled_logs (so both arrays are read)."""
    operators: dict[str, dict] = {}
    for log in logs:
        op = operators.setdefault(log.operator, {"name": log.operator, "email": [f"ct@{log.operator.lower()}.test"],
                                                 "logs": [], "tiled_logs": []})
        entry = {
            "description": log.description,
            "log_id": base64.b64encode(log.log_id).decode(),
            "key": base64.b64encode(log.spki).decode(),
            "mmd": 86400,
            "state": {log.state: {"timestamp": rfc3339(log.state_since)}},
        }
        if op["logs"]:
            entry["submission_url"] = f"https://{log.description.replace(' ', '-').lower()}.test/"
            op["tiled_logs"].append(entry)
        else:
            entry["url"] = f"https://{log.description.replace(' ', '-').lower()}.test/"
            op["logs"].append(entry)
    return json.dumps({"version": "1.0", "log_list_timestamp": rfc3339(published or now() - dt.timedelta(days=3)),
                       "operators": list(operators.values())}, indent=1)


def _u24(data: bytes) -> bytes:
    return struct.pack(">I", len(data))[1:] + data


def _u16(data: bytes) -> bytes:
    return struct.pack(">H", len(data)) + data


def sign_sct(log: Log, signed_entry: bytes, entry_type: int, when: dt.datetime, corrupt: bool = False) -> bytes:
    """A v1 SCT (its SerializedSCT bytes) by `log` over `signed_entry` at `when`."""
    timestamp = int(when.timestamp() * 1000)
    signed = struct.pack(">BBQH", 0, 0, timestamp, entry_type) + signed_entry + _u16(b"")
    signature = log.key.sign(signed, ec.ECDSA(hashes.SHA256()))
    if corrupt:  # a signature over other data: well-formed, and wrong
        signature = log.key.sign(signed + b"x", ec.ECDSA(hashes.SHA256()))
    return bytes([0]) + log.log_id + struct.pack(">Q", timestamp) + _u16(b"") + bytes([4, 3]) + _u16(signature)


def sct_list(scts: Sequence[bytes]) -> bytes:
    """A SignedCertificateTimestampList (TLS encoding)."""
    return _u16(b"".join(_u16(s) for s in scts))


@dataclass
class SCTSpec:
    """An SCT to make: by `log`, `age` before now, with a bad signature when `corrupt`."""
    log: Log
    age: dt.timedelta = dt.timedelta(days=1)
    corrupt: bool = False


def issue_leaf(issuer: pkilib.Issued, name: str, embedded: Sequence[SCTSpec] = (),
               lifetime: dt.timedelta = dt.timedelta(days=90)) -> pkilib.Issued:
    """A leaf for `name` from `issuer` (the web-PKI profile pinproxy checks), with the SCTs of
    `embedded` in its SCT list extension, each signed over its precertificate entry."""
    key = ec.generate_private_key(ec.SECP256R1())
    start = now() - dt.timedelta(days=10)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pinproxy tests"),
                                 x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(issuer.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + lifetime)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.cert.public_key()), critical=False)
    )
    if not embedded:
        return pkilib.Issued(builder.sign(issuer.key, hashes.SHA256()), key)
    # The TBS the logs sign: the final certificate's without the SCT list (the SCT list goes
    # last, so removing it gives exactly these bytes back).
    tbs = builder.sign(issuer.key, hashes.SHA256()).tbs_certificate_bytes
    issuer_key_hash = hashlib.sha256(issuer.cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)).digest()
    entry = issuer_key_hash + _u24(tbs)
    scts = [sign_sct(s.log, entry, 1, now() - s.age, s.corrupt) for s in embedded]
    # extnValue: an OCTET STRING holding the TLS-encoded list.
    value = sct_list(scts)
    der = b"\x04" + _der_length(len(value)) + value
    final = builder.add_extension(x509.UnrecognizedExtension(SCT_LIST_OID, der), critical=False).sign(issuer.key, hashes.SHA256())
    assert final.tbs_certificate_bytes != tbs
    return pkilib.Issued(final, key)


def tls_scts(leaf: pkilib.Issued, specs: Sequence[SCTSpec]) -> bytes:
    """The SignedCertificateTimestampList a server sends in the TLS extension for `leaf`."""
    entry = _u24(leaf.cert.public_bytes(serialization.Encoding.DER))
    return sct_list([sign_sct(s.log, entry, 0, now() - s.age, s.corrupt) for s in specs])


def ocsp_staple(leaf: pkilib.Issued, issuer: pkilib.Issued, specs: Sequence[SCTSpec]) -> bytes:
    """A DER OCSP response by `issuer` saying `leaf` is good (valid from an hour ago for three
    days), whose SingleResponse carries the SCTs of `specs` in its SCT list extension."""
    start = now() - dt.timedelta(hours=1)
    built = (ocsp.OCSPResponseBuilder()
             .add_response(cert=leaf.cert, issuer=issuer.cert, algorithm=hashes.SHA1(), cert_status=ocsp.OCSPCertStatus.GOOD,
                           this_update=start, next_update=start + dt.timedelta(days=3), revocation_time=None, revocation_reason=None)
             .responder_id(ocsp.OCSPResponderEncoding.HASH, issuer.cert)
             .sign(issuer.key, hashes.SHA256()))
    outer, rest = der_decoder.decode(built.public_bytes(serialization.Encoding.DER), asn1Spec=_OCSPResponse())
    assert not rest
    basic, rest = der_decoder.decode(bytes(outer["responseBytes"]["response"]), asn1Spec=_BasicOCSPResponse())
    assert not rest
    extension = _Extension()
    extension["extnID"] = univ.ObjectIdentifier(OCSP_SCT_LIST_OID)
    # extnValue: an OCTET STRING holding the TLS-encoded list, as in a certificate.
    extension["extnValue"] = der_encoder.encode(univ.OctetString(tls_scts(leaf, specs)))
    basic["tbsResponseData"]["responses"][0]["singleExtensions"].append(extension)
    tbs = der_encoder.encode(basic["tbsResponseData"])
    if isinstance(issuer.key, rsa.RSAPrivateKey):
        signature = issuer.key.sign(tbs, padding.PKCS1v15(), hashes.SHA256())
    else:
        signature = issuer.key.sign(tbs, ec.ECDSA(hashes.SHA256()))
    basic["signature"] = univ.BitString.fromOctetString(signature)
    outer["responseBytes"]["response"] = univ.OctetString(der_encoder.encode(basic))
    der = der_encoder.encode(outer)
    # What came out is an OCSP response cryptography reads, with the list where it belongs.
    parsed = ocsp.load_der_ocsp_response(der)
    assert parsed.tbs_response_bytes == tbs
    assert parsed.single_extensions.get_extension_for_oid(x509.ObjectIdentifier(OCSP_SCT_LIST_OID))
    return der


def _explicit(number: int, asn1_type):
    return asn1_type.subtype(explicitTag=tag.Tag(tag.tagClassContext, tag.tagFormatConstructed, number))


class _Extension(univ.Sequence):
    componentType = namedtype.NamedTypes(
        namedtype.NamedType("extnID", univ.ObjectIdentifier()),
        namedtype.DefaultedNamedType("critical", univ.Boolean(False)),
        namedtype.NamedType("extnValue", univ.OctetString()))


class _Extensions(univ.SequenceOf):
    componentType = _Extension()


class _SingleResponse(univ.Sequence):
    componentType = namedtype.NamedTypes(
        namedtype.NamedType("certID", univ.Any()),
        namedtype.NamedType("certStatus", univ.Any()),
        namedtype.NamedType("thisUpdate", useful.GeneralizedTime()),
        namedtype.OptionalNamedType("nextUpdate", _explicit(0, useful.GeneralizedTime())),
        namedtype.OptionalNamedType("singleExtensions", _explicit(1, _Extensions())))


class _ResponseData(univ.Sequence):
    componentType = namedtype.NamedTypes(
        namedtype.OptionalNamedType("version", _explicit(0, univ.Integer())),
        namedtype.NamedType("responderID", univ.Any()),
        namedtype.NamedType("producedAt", useful.GeneralizedTime()),
        namedtype.NamedType("responses", univ.SequenceOf(componentType=_SingleResponse())),
        namedtype.OptionalNamedType("responseExtensions", _explicit(1, _Extensions())))


class _BasicOCSPResponse(univ.Sequence):
    componentType = namedtype.NamedTypes(
        namedtype.NamedType("tbsResponseData", _ResponseData()),
        namedtype.NamedType("signatureAlgorithm", univ.Any()),
        namedtype.NamedType("signature", univ.BitString()),
        namedtype.OptionalNamedType("certs", _explicit(0, univ.Any())))


class _ResponseBytes(univ.Sequence):
    componentType = namedtype.NamedTypes(
        namedtype.NamedType("responseType", univ.ObjectIdentifier()),
        namedtype.NamedType("response", univ.OctetString()))


class _OCSPResponse(univ.Sequence):
    componentType = namedtype.NamedTypes(
        namedtype.NamedType("responseStatus", univ.Enumerated()),
        namedtype.OptionalNamedType("responseBytes", _explicit(0, _ResponseBytes())))


# SSL_EXT_CLIENT_HELLO | SSL_EXT_TLS1_2_SERVER_HELLO | SSL_EXT_TLS1_3_CERTIFICATE |
# SSL_EXT_IGNORE_ON_RESUMPTION: where OpenSSL itself carries the SCT extension.
SERVERINFO_CONTEXT = 0x0080 | 0x0100 | 0x1000 | 0x0040


def serverinfo_pem(scts: bytes) -> bytes:
    """An `openssl s_server -serverinfo` file carrying `scts` as the signed_certificate_timestamp
    extension (18): SERVERINFOV2, whose context says in which messages it goes (here the TLS 1.2
    ServerHello and the TLS 1.3 Certificate entry)."""
    block = struct.pack(">I", SERVERINFO_CONTEXT) + struct.pack(">H", 18) + _u16(scts)
    return b"-----BEGIN SERVERINFOV2 FOR CT-----\n" + base64.encodebytes(block) + b"-----END SERVERINFOV2 FOR CT-----\n"


def _der_length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def write_pem(path: Path, *issued: pkilib.Issued) -> Path:
    path.write_bytes(b"".join(i.pem for i in issued))
    return path
