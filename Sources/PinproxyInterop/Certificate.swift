import Glibc
import Foundation
import COpenSSL
import CPinproxyShims

/// An X.509 certificate: owns one OpenSSL `X509` object and frees it once.
public final class Certificate: @unchecked Sendable, Hashable, CustomStringConvertible {
    /// The owned `X509 *`; never freed elsewhere.
    let handle: OpaquePointer

    /// Takes ownership of `handle`.
    init(taking handle: OpaquePointer) {
        self.handle = handle
    }

    /// Shares `handle`, adding a reference that this object releases.
    convenience init(retaining handle: OpaquePointer) {
        X509_up_ref(handle)
        self.init(taking: handle)
    }

    deinit {
        X509_free(handle)
    }

    /// Parses one DER certificate; trailing bytes are an error.
    public convenience init(der: [UInt8]) throws {
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor = buffer.baseAddress
            let cert = d2i_X509(nil, &cursor, buffer.count)
            if let cert, let cursor, cursor != buffer.baseAddress! + buffer.count {
                X509_free(cert)
                return nil
            }
            return cert
        }
        guard let parsed else { throw OpenSSLError.drain("not a DER certificate") }
        self.init(taking: parsed)
    }

    /// Parses a PEM bundle (every CERTIFICATE block, in order) or a single DER certificate.
    /// Nothing is skipped: a block that is malformed, of another type or not a certificate, or
    /// bytes after a DER certificate, is an error naming the block.
    public static func parseAll(_ bytes: [UInt8]) throws(X509ParseError) -> [Certificate] {
        guard bytes.isPEM else {
            guard let certificate = try? Certificate(der: bytes) else {
                throw X509ParseError(description: "holds no PEM or DER certificate")
            }
            return [certificate]
        }
        var result: [Certificate] = []
        for block in try PEMBlocks.read(bytes, types: ["CERTIFICATE", "X509 CERTIFICATE"], what: "certificate") {
            guard let certificate = try? Certificate(der: block.der) else { throw PEMBlocks.invalid(block, "certificate") }
            result.append(certificate)
        }
        return result
    }

    /// The certificate's DER encoding.
    public var der: [UInt8] {
        derEncode { i2d_X509(handle, $0) }
    }

    /// The DER SubjectPublicKeyInfo: what a public-key pin hashes.
    public var subjectPublicKeyInfoDER: [UInt8] {
        guard let key = X509_get_X509_PUBKEY(handle) else { return [] }
        return derEncode { i2d_X509_PUBKEY(key, $0) }
    }

    /// SHA-256 of the DER SubjectPublicKeyInfo.
    public var publicKeySHA256: [UInt8] { SHA256.hash(subjectPublicKeyInfoDER) }

    /// SHA-256 of the certificate DER.
    public var certificateSHA256: [UInt8] { SHA256.hash(der) }

    /// The subject in RFC 2253 form.
    public var subject: String { formatName(X509_get_subject_name(handle)) }

    /// The issuer in RFC 2253 form.
    public var issuer: String { formatName(X509_get_issuer_name(handle)) }

    /// The start of the validity period.
    public var notBefore: Date { date(from: X509_get0_notBefore(handle)) ?? .distantPast }

    /// The end of the validity period.
    public var notAfter: Date { date(from: X509_get0_notAfter(handle)) ?? .distantPast }

    /// Whether subject and issuer names are equal (a root or a self-signed server certificate).
    public var isSelfIssued: Bool {
        X509_NAME_cmp(X509_get_subject_name(handle), X509_get_issuer_name(handle)) == 0
    }

    /// The serial number in upper-case hexadecimal.
    public var serialNumber: String {
        guard let serial = X509_get0_serialNumber(handle), let bn = ASN1_INTEGER_to_BN(serial, nil) else { return "" }
        defer { BN_free(bn) }
        guard let hex = BN_bn2hex(bn) else { return "" }
        defer { pp_OPENSSL_free(hex) }
        return String(cString: hex)
    }

    /// Whether the certificate carries an extendedKeyUsage extension that includes serverAuth
    /// (false without the extension, which allows every usage).
    public var extendedKeyUsageIncludesServerAuth: Bool {
        let usages = X509_get_extended_key_usage(handle)  // UINT32_MAX without the extension
        return usages != UInt32.max && usages & UInt32(XKU_SSL_SERVER) != 0
    }

    /// subjectAltName entries of type DNS and IP, as `DNS:name` and `IP:address`.
    public var subjectAlternativeNames: [String] {
        guard let raw = X509_get_ext_d2i(handle, NID_subject_alt_name, nil, nil) else { return [] }
        let names = OpaquePointer(raw)
        defer { pp_GENERAL_NAMES_free(names) }
        var result: [String] = []
        for index in 0..<pp_sk_GENERAL_NAME_num(names) {
            guard let name = pp_sk_GENERAL_NAME_value(names, index) else { continue }
            switch name.pointee.type {
            case GEN_DNS:
                let value = name.pointee.d.dNSName!
                result.append("DNS:" + String(decoding: UnsafeBufferPointer(start: ASN1_STRING_get0_data(value), count: Int(ASN1_STRING_length(value))), as: UTF8.self))
            case GEN_IPADD:
                let value = name.pointee.d.iPAddress!
                let bytes = Array(UnsafeBufferPointer(start: ASN1_STRING_get0_data(value), count: Int(ASN1_STRING_length(value))))
                result.append("IP:" + (IPAddress(bytes: bytes)?.description ?? "?"))
            default:
                continue
            }
        }
        return result
    }

    /// Whether a subjectAltName DNS entry matches `name`: no subject-CN fallback, no partial wildcards.
    public func matchesHostName(_ name: String) -> Bool {
        let flags = UInt32(X509_CHECK_FLAG_NEVER_CHECK_SUBJECT | X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS)
        return X509_check_host(handle, name, name.utf8.count, flags, nil) == 1
    }

    /// Whether a subjectAltName IP entry equals `address`.
    public func matchesIPAddress(_ address: IPAddress) -> Bool {
        address.bytes.withUnsafeBufferPointer { buffer in
            X509_check_ip(handle, buffer.baseAddress, buffer.count, 0) == 1
        }
    }

    /// The certificate in PEM form.
    public var pem: String {
        withMemoryBIO { bio in _ = PEM_write_bio_X509(bio, handle) }
    }

    public var description: String { subject }

    public static func == (lhs: Certificate, rhs: Certificate) -> Bool {
        X509_cmp(lhs.handle, rhs.handle) == 0
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(certificateSHA256)
    }

}

extension Array where Element == UInt8 {
    /// Whether the bytes look like PEM text rather than DER.
    var isPEM: Bool {
        let marker = Array("-----BEGIN".utf8)
        guard count >= marker.count else { return false }
        for start in 0...(count - marker.count) where self[start] == marker[0] {
            if Array(self[start..<start + marker.count]) == marker { return true }
        }
        return false
    }
}

extension Certificate {
    /// Whether this (CA) certificate's name constraints, if any, permit the DNS name `host`.
    /// OpenSSL checks constraints against the names a certificate carries, so a leaf whose
    /// `*.example.com` covers an excluded `bar.example.com` passes verification; this checks the
    /// host the client actually asked for, with OpenSSL's own matcher, on a stand-in
    /// certificate that names only that host.
    public func nameConstraintsPermit(dnsName host: String) -> Bool {
        guard let raw = X509_get_ext_d2i(handle, NID_name_constraints, nil, nil) else { return true }
        let constraints = raw.assumingMemoryBound(to: NAME_CONSTRAINTS.self)
        defer { NAME_CONSTRAINTS_free(constraints) }
        guard let probe = X509_new(), X509_set_version(probe, 2) == 1 else { return false }
        defer { X509_free(probe) }
        var context = X509V3_CTX()
        X509V3_set_ctx(&context, probe, probe, nil, nil, 0)
        guard let altName = X509V3_EXT_conf_nid(nil, &context, NID_subject_alt_name, "DNS:" + host) else {
            _ = drainErrorQueue()
            return false
        }
        defer { X509_EXTENSION_free(altName) }
        guard X509_add_ext(probe, altName, -1) == 1 else {
            _ = drainErrorQueue()
            return false
        }
        // Fills the extension cache NAME_CONSTRAINTS_check reads; its verdict on the stand-in
        // (no key, no signature) does not matter.
        _ = X509_check_purpose(probe, -1, 0)
        _ = drainErrorQueue()
        return NAME_CONSTRAINTS_check(probe, constraints) == X509_V_OK
    }
}
