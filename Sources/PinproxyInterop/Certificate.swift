import Glibc
import Foundation
import Synchronization
import COpenSSL
import CPinproxyShims

/// An X.509 certificate: owns one OpenSSL `X509` object and frees it once.
public final class Certificate: @unchecked Sendable, Hashable, CustomStringConvertible {
    /// The owned `X509 *`; never freed elsewhere.
    let handle: OpaquePointer
    /// What is derived from the certificate's bytes, each computed on first use and kept: an
    /// `X509` does not change once parsed, and a peer certificate is one object for every
    /// connection of its session (`PeerCertificates`).
    private let derCache = AtomicLazyReference<Derived<[UInt8]>>()
    private let certificateDigestCache = AtomicLazyReference<Derived<[UInt8]>>()
    private let publicKeyDigestCache = AtomicLazyReference<Derived<[UInt8]>>()
    private let subjectCache = AtomicLazyReference<Derived<String>>()
    private let commonNamesCache = AtomicLazyReference<Derived<[String]>>()
    private let altNamesCache = AtomicLazyReference<Derived<[GeneralName]>>()
    private let undecodableCache = AtomicLazyReference<Derived<[String]>>()

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
            guard let start = buffer.baseAddress else { return nil }  // no bytes
            var cursor = Optional(start)
            let cert = d2i_X509(nil, &cursor, buffer.count)
            if let cert, cursor != start + buffer.count {
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
        derived(derCache) { derEncode { i2d_X509(handle, $0) } }
    }

    /// The DER SubjectPublicKeyInfo: what a public-key pin hashes.
    public var subjectPublicKeyInfoDER: [UInt8] {
        guard let key = X509_get_X509_PUBKEY(handle) else { return [] }
        return derEncode { i2d_X509_PUBKEY(key, $0) }
    }

    /// SHA-256 of the DER SubjectPublicKeyInfo.
    public var publicKeySHA256: [UInt8] {
        derived(publicKeyDigestCache) { SHA256.hash(subjectPublicKeyInfoDER) }
    }

    /// SHA-256 of the certificate DER.
    public var certificateSHA256: [UInt8] {
        derived(certificateDigestCache) { SHA256.hash(der) }
    }

    /// The subject in RFC 2253 form.
    public var subject: String {
        derived(subjectCache) { formatName(X509_get_subject_name(handle)) }
    }

    /// The value `cache` holds, computed by `compute` if it holds none yet. Threads that race
    /// compute the same value; the first stored is the one every caller gets.
    private func derived<Value>(_ cache: borrowing AtomicLazyReference<Derived<Value>>, _ compute: () -> Value) -> Value {
        if let stored = cache.load() { return stored.value }
        return cache.storeIfNil(Derived(compute())).value
    }

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
                guard let value = name.pointee.d.dNSName else { continue }
                result.append("DNS:" + String(decoding: UnsafeBufferPointer(start: ASN1_STRING_get0_data(value), count: Int(ASN1_STRING_length(value))), as: UTF8.self))
            case GEN_IPADD:
                guard let value = name.pointee.d.iPAddress else { continue }
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

/// A value computed once from a certificate (`Certificate`'s caches hold objects).
final class Derived<Value: Sendable>: Sendable {
    let value: Value

    init(_ value: Value) {
        self.value = value
    }
}

/// The `Certificate` objects of the peer chains of the sessions one loop resumed, by `X509`
/// address. A resumed session presents the very `X509` objects of the session it resumes, so
/// every connection of a session gets the same `Certificate`, and what is derived from it (the
/// digests that pins and the verified-chain memo compare, the subject a log line shows) is
/// computed once per certificate instead of once per connection. Each entry holds a reference
/// to its `X509`: no address here can be freed and reused for another certificate. At most
/// `limit` entries; a full table starts over. Used on its loop's thread only.
final class PeerCertificates {
    private var byAddress: [OpaquePointer: Certificate] = [:]
    let limit: Int

    init(limit: Int = 512) {
        self.limit = limit
    }

    /// The one `Certificate` for `x509` (which the caller holds a reference to).
    func certificate(for x509: OpaquePointer) -> Certificate {
        if let known = byAddress[x509] { return known }
        if byAddress.count >= limit { byAddress.removeAll(keepingCapacity: true) }
        let certificate = Certificate(retaining: x509)
        byAddress[x509] = certificate
        return certificate
    }

    /// Entries held.
    var count: Int { byAddress.count }
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
    /// certificate that names only that host. A nameConstraints extension that cannot be
    /// decoded, or that appears twice, permits nothing.
    public func nameConstraintsPermit(dnsName host: String) -> Bool {
        var found: Int32 = 0  // -1: absent; -2: more than one; else the criticality
        guard let raw = X509_get_ext_d2i(handle, NID_name_constraints, &found, nil) else {
            _ = drainErrorQueue()
            return found == -1
        }
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

// MARK: - Fields the web-PKI rules read (Sources/PinproxyPolicy/WebPKI), through OpenSSL's accessors

extension Certificate {
    /// The X.509v3 extensions the web-PKI rules look at.
    public enum Extension: Sendable, CaseIterable {
        case basicConstraints, keyUsage, extendedKeyUsage, subjectAltName, nameConstraints,
             policyConstraints, authorityKeyIdentifier, subjectKeyIdentifier

        var nid: Int32 {
            switch self {
            case .basicConstraints: return NID_basic_constraints
            case .keyUsage: return NID_key_usage
            case .extendedKeyUsage: return NID_ext_key_usage
            case .subjectAltName: return NID_subject_alt_name
            case .nameConstraints: return NID_name_constraints
            case .policyConstraints: return NID_policy_constraints
            case .authorityKeyIdentifier: return NID_authority_key_identifier
            case .subjectKeyIdentifier: return NID_subject_key_identifier
            }
        }
    }

    /// Whether `ext` is marked critical; nil when the certificate does not carry it.
    public func criticality(of ext: Extension) -> Bool? {
        let index = X509_get_ext_by_NID(handle, ext.nid, -1)
        guard index >= 0, let found = X509_get_ext(handle, index) else { return nil }
        return X509_EXTENSION_get_critical(found) != 0
    }

    /// OpenSSL's cached extension flags (EXFLAG_*); computing them decodes the extensions once.
    private var extensionFlags: UInt32 { X509_get_extension_flags(handle) }

    /// basicConstraints: whether cA is asserted and the pathLenConstraint, if any.
    public struct BasicConstraints: Sendable, Equatable {
        public let isCA: Bool
        public let pathLength: Int?
    }

    /// The basicConstraints extension; nil when absent.
    public var basicConstraints: BasicConstraints? {
        guard extensionFlags & UInt32(EXFLAG_BCONS) != 0 else { return nil }
        let pathLength = X509_get_pathlen(handle)
        return BasicConstraints(isCA: extensionFlags & UInt32(EXFLAG_CA) != 0, pathLength: pathLength >= 0 ? Int(pathLength) : nil)
    }

    /// keyUsage bits (OpenSSL's KU_* values).
    public struct KeyUsage: OptionSet, Sendable {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        public static let digitalSignature = KeyUsage(rawValue: UInt32(KU_DIGITAL_SIGNATURE))
        public static let keyEncipherment = KeyUsage(rawValue: UInt32(KU_KEY_ENCIPHERMENT))
        public static let keyAgreement = KeyUsage(rawValue: UInt32(KU_KEY_AGREEMENT))
        public static let keyCertSign = KeyUsage(rawValue: UInt32(KU_KEY_CERT_SIGN))
        public static let cRLSign = KeyUsage(rawValue: UInt32(KU_CRL_SIGN))
    }

    /// The keyUsage extension; nil when absent.
    public var keyUsage: KeyUsage? {
        guard extensionFlags & UInt32(EXFLAG_KUSAGE) != 0 else { return nil }
        return KeyUsage(rawValue: X509_get_key_usage(handle))
    }

    /// extendedKeyUsage purposes OpenSSL knows (XKU_* values); other OIDs are not listed.
    public struct ExtendedKeyUsage: OptionSet, Sendable {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        public static let serverAuth = ExtendedKeyUsage(rawValue: UInt32(XKU_SSL_SERVER))
        public static let clientAuth = ExtendedKeyUsage(rawValue: UInt32(XKU_SSL_CLIENT))
        public static let any = ExtendedKeyUsage(rawValue: UInt32(XKU_ANYEKU))
    }

    /// The extendedKeyUsage extension; nil when absent.
    public var extendedKeyUsage: ExtendedKeyUsage? {
        guard extensionFlags & UInt32(EXFLAG_XKUSAGE) != 0 else { return nil }
        return ExtendedKeyUsage(rawValue: X509_get_extended_key_usage(handle))
    }

    /// The subjectKeyIdentifier; nil when absent.
    public var subjectKeyIdentifier: [UInt8]? {
        X509_get0_subject_key_id(handle).map { Self.bytes(of: $0) }
    }

    /// The authorityKeyIdentifier extension's fields.
    public struct AuthorityKeyIdentifier: Sendable, Equatable {
        public let keyIdentifier: [UInt8]?
        public let hasAuthorityCertIssuer: Bool
        public let hasAuthorityCertSerialNumber: Bool
    }

    /// The authorityKeyIdentifier extension; nil when absent.
    public var authorityKeyIdentifier: AuthorityKeyIdentifier? {
        guard criticality(of: .authorityKeyIdentifier) != nil else { return nil }
        _ = extensionFlags
        return AuthorityKeyIdentifier(keyIdentifier: X509_get0_authority_key_id(handle).map { Self.bytes(of: $0) },
                                      hasAuthorityCertIssuer: X509_get0_authority_issuer(handle) != nil,
                                      hasAuthorityCertSerialNumber: X509_get0_authority_serial(handle) != nil)
    }

    /// What RFC 5280 4.1.2.2 asks of a serial number.
    public struct SerialNumberShape: Sendable, Equatable {
        public let isNegative: Bool
        public let isZero: Bool
        /// The length of its DER encoding's contents, in octets.
        public let encodedLength: Int
    }

    /// The serial number's sign and encoded length.
    public var serialNumberShape: SerialNumberShape {
        guard let serial = X509_get0_serialNumber(handle), let bn = ASN1_INTEGER_to_BN(serial, nil) else {
            return SerialNumberShape(isNegative: false, isZero: true, encodedLength: 0)
        }
        defer { BN_free(bn) }
        let bits = Int(BN_num_bits(bn))
        // Two's complement: a positive value whose top bit is set takes one more octet.
        return SerialNumberShape(isNegative: BN_is_negative(bn) != 0, isZero: BN_is_zero(bn) != 0, encodedLength: bits / 8 + 1)
    }

    /// The subject public key's algorithm and size.
    public struct PublicKeyShape: Sendable, Equatable {
        public enum Algorithm: Sendable, Equatable { case rsa, dsa, ec, ed25519, ed448, other }
        public let algorithm: Algorithm
        public let bits: Int
    }

    /// The subject public key's algorithm and size; nil when OpenSSL cannot decode the key.
    public var publicKeyShape: PublicKeyShape? {
        guard let key = X509_get0_pubkey(handle) else {
            _ = drainErrorQueue()
            return nil
        }
        let algorithm: PublicKeyShape.Algorithm
        switch EVP_PKEY_get_base_id(key) {
        case EVP_PKEY_RSA, EVP_PKEY_RSA_PSS: algorithm = .rsa
        case EVP_PKEY_DSA: algorithm = .dsa
        case EVP_PKEY_EC: algorithm = .ec
        case EVP_PKEY_ED25519: algorithm = .ed25519
        case EVP_PKEY_ED448: algorithm = .ed448
        default: algorithm = .other
        }
        return PublicKeyShape(algorithm: algorithm, bits: Int(EVP_PKEY_get_bits(key)))
    }

    /// Whether the subject name has no attribute at all.
    public var hasEmptySubject: Bool { X509_NAME_entry_count(X509_get_subject_name(handle)) == 0 }

    /// Every commonName of the subject, as UTF-8.
    public var subjectCommonNames: [String] {
        derived(commonNamesCache) { readSubjectCommonNames() }
    }

    private func readSubjectCommonNames() -> [String] {
        guard let name = X509_get_subject_name(handle) else { return [] }
        var result: [String] = []
        var position: Int32 = -1
        while true {
            position = X509_NAME_get_index_by_NID(name, NID_commonName, position)
            guard position >= 0 else { break }
            guard let entry = X509_NAME_get_entry(name, position), let data = X509_NAME_ENTRY_get_data(entry) else { continue }
            var utf8: UnsafeMutablePointer<UInt8>?
            let length = ASN1_STRING_to_UTF8(&utf8, data)
            guard length >= 0, let utf8 else {
                _ = drainErrorQueue()
                result.append("")
                continue
            }
            result.append(String(decoding: UnsafeBufferPointer(start: utf8, count: Int(length)), as: UTF8.self))
            pp_OPENSSL_free(utf8)
        }
        return result
    }

    /// One GeneralName, as the rules need it.
    public enum GeneralName: Sendable, Hashable {
        case dns(String)
        case ip([UInt8])
        /// Any other kind (email, URI, directory name …), with OpenSSL's GEN_* type.
        case other(Int32)
    }

    /// The subjectAltName entries, in order; empty when the extension is absent.
    public var subjectAltNameEntries: [GeneralName] {
        derived(altNamesCache) { readSubjectAltNameEntries() }
    }

    private func readSubjectAltNameEntries() -> [GeneralName] {
        guard let raw = X509_get_ext_d2i(handle, NID_subject_alt_name, nil, nil) else { return [] }
        let names = OpaquePointer(raw)
        defer { pp_GENERAL_NAMES_free(names) }
        return (0..<pp_sk_GENERAL_NAME_num(names)).compactMap { pp_sk_GENERAL_NAME_value(names, $0).map(Self.generalName) }
    }

    /// A nameConstraints extension: each subtree list is nil when absent.
    public struct NameConstraints: Sendable, Equatable {
        public let permitted: [GeneralName]?
        public let excluded: [GeneralName]?
    }

    /// The nameConstraints extension; nil when absent or undecodable.
    public var nameConstraints: NameConstraints? {
        guard let raw = X509_get_ext_d2i(handle, NID_name_constraints, nil, nil) else {
            _ = drainErrorQueue()
            return nil
        }
        let constraints = raw.assumingMemoryBound(to: NAME_CONSTRAINTS.self)
        defer { NAME_CONSTRAINTS_free(constraints) }
        func subtrees(_ stack: OpaquePointer?) -> [GeneralName]? {
            guard let stack else { return nil }
            return (0..<OPENSSL_sk_num(stack)).compactMap { index in
                guard let subtree = OPENSSL_sk_value(stack, index)?.assumingMemoryBound(to: GENERAL_SUBTREE.self),
                      let base = subtree.pointee.base else { return nil }
                return Self.generalName(base)
            }
        }
        return NameConstraints(permitted: subtrees(constraints.pointee.permittedSubtrees),
                               excluded: subtrees(constraints.pointee.excludedSubtrees))
    }

    /// The short names of the extensions OpenSSL knows but cannot decode (a malformed
    /// authorityInfoAccess, say).
    public var undecodableExtensions: [String] {
        derived(undecodableCache) { readUndecodableExtensions() }
    }

    private func readUndecodableExtensions() -> [String] {
        var names: [String] = []
        for index in 0..<X509_get_ext_count(handle) {
            guard let ext = X509_get_ext(handle, index), let method = X509V3_EXT_get(ext) else { continue }
            if let decoded = X509V3_EXT_d2i(ext) {
                if let item = method.pointee.it {
                    ASN1_item_free(OpaquePointer(decoded), item())
                } else if let free = method.pointee.ext_free {
                    free(decoded)
                }
            } else {
                _ = drainErrorQueue()
                let nid = OBJ_obj2nid(X509_EXTENSION_get_object(ext))
                names.append(String(cString: OBJ_nid2sn(nid)))
            }
        }
        return names
    }

    private static func generalName(_ name: UnsafeMutablePointer<GENERAL_NAME>) -> GeneralName {
        switch name.pointee.type {
        case GEN_DNS:
            return .dns(String(decoding: bytes(of: name.pointee.d.dNSName), as: UTF8.self))
        case GEN_IPADD:
            return .ip(bytes(of: name.pointee.d.iPAddress))
        default:
            return .other(name.pointee.type)
        }
    }

    private static func bytes(of string: UnsafePointer<ASN1_STRING>?) -> [UInt8] {
        guard let string, let data = ASN1_STRING_get0_data(string) else { return [] }
        return Array(UnsafeBufferPointer(start: data, count: Int(ASN1_STRING_length(string))))
    }
}
