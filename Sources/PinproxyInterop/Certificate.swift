import Glibc
import FoundationEssentials
import PinproxyCore
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
    let commonNamesCache = AtomicLazyReference<Derived<[String]>>()
    let altNamesCache = AtomicLazyReference<Derived<[GeneralName]>>()
    let undecodableCache = AtomicLazyReference<Derived<[String]>>()

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
    func derived<Value>(_ cache: borrowing AtomicLazyReference<Derived<Value>>, _ compute: () -> Value) -> Value {
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

// MARK: - Shapes the web-PKI rules read (Sources/PinproxyPolicy/WebPKI)

extension Certificate {
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
}

/// A value computed once from a certificate (`Certificate`'s caches hold objects).
final class Derived<Value: Sendable>: Sendable {
    let value: Value

    init(_ value: Value) {
        self.value = value
    }
}
