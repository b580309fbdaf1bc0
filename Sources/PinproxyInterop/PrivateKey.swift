import Glibc
import FoundationEssentials
import COpenSSL
import CPinproxyShims
import PinproxyCore

/// A private key: owns one OpenSSL `EVP_PKEY`.
public final class PrivateKey: @unchecked Sendable {
    let handle: OpaquePointer

    private init(taking handle: OpaquePointer) {
        self.handle = handle
    }

    deinit {
        EVP_PKEY_free(handle)
    }

    /// A new ECDSA P-256 key.
    public static func generateP256() throws -> PrivateKey {
        guard let key = pp_EVP_EC_gen_p256() else { throw OpenSSLError.drain("generating a P-256 key") }
        return PrivateKey(taking: key)
    }

    /// Parses a PEM private key (PKCS#8 or traditional, unencrypted). An encrypted key is
    /// refused: no passphrase is asked for (OpenSSL's default would prompt on the terminal).
    public convenience init(pem: [UInt8]) throws {
        let parsed: OpaquePointer? = pem.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PrivateKey(bio, nil, { _, _, _, _ in -1 }, nil)
        }
        guard let parsed else { throw OpenSSLError.drain("not a PEM private key") }
        self.init(taking: parsed)
    }

    /// The key as unencrypted PKCS#8 PEM.
    public var pem: String {
        withMemoryBIO { bio in _ = PEM_write_bio_PrivateKey(bio, handle, nil, nil, 0, nil, nil) }
    }

    /// Whether `certificate` carries this key's public half.
    public func matches(_ certificate: Certificate) -> Bool {
        X509_check_private_key(certificate.handle, handle) == 1
    }
}

extension CertificateBuilder {
    /// A self-signed CA certificate for `key` (basicConstraints CA:TRUE, pathlen 0), limited to
    /// TLS servers by its extendedKeyUsage: verifiers that apply a CA's EKU to the chain below
    /// it (OpenSSL, Windows, NSS) then refuse code-signing or e-mail certificates it signed.
    public static func makeCA(commonName: String, key: PrivateKey, notBefore: Date, notAfter: Date) throws -> Certificate {
        try build(commonName: commonName, key: key, notBefore: notBefore, notAfter: notAfter, issuer: nil, issuerKey: key, extensions: [
            (NID_basic_constraints, "critical,CA:TRUE,pathlen:0"),
            (NID_key_usage, "critical,keyCertSign,cRLSign"),
            (NID_ext_key_usage, "serverAuth"),
            (NID_subject_key_identifier, "hash"),
        ])
    }

    /// A TLS server leaf for `name`, carrying `key`, signed by `issuer` with `issuerKey`.
    public static func makeLeaf(for name: SubjectName, key: PrivateKey, issuer: Certificate, issuerKey: PrivateKey,
                                notBefore: Date, notAfter: Date) throws -> Certificate {
        let text: String
        let altName: String
        switch name {
        case .dns(let host): (text, altName) = (host, "DNS:\(host)")
        case .ip(let address): (text, altName) = (address.description, "IP:\(address.description)")
        }
        // A commonName holds at most 64 characters; a longer name lives in the SAN alone, which
        // is then critical (RFC 5280, empty subject).
        let commonName = text.utf8.count <= 64 ? text : nil
        return try build(commonName: commonName, key: key, notBefore: notBefore, notAfter: notAfter, issuer: issuer, issuerKey: issuerKey, extensions: [
            (NID_basic_constraints, "critical,CA:FALSE"),
            (NID_key_usage, "critical,digitalSignature"),
            (NID_ext_key_usage, "serverAuth"),
            (NID_subject_alt_name, (commonName == nil ? "critical," : "") + altName),
            (NID_subject_key_identifier, "hash"),
            (NID_authority_key_identifier, "keyid:always"),
        ])
    }

    private static func build(commonName: String?, key: PrivateKey, notBefore: Date, notAfter: Date, issuer: Certificate?,
                              issuerKey: PrivateKey, extensions: [(Int32, String)]) throws -> Certificate {
        guard let x509 = X509_new() else { throw OpenSSLError.drain("X509_new") }
        let certificate = Certificate(taking: x509)
        guard X509_set_version(x509, 2) == 1 else { throw OpenSSLError.drain("X509_set_version") }

        guard let serial = BN_new() else { throw OpenSSLError.drain("BN_new") }
        defer { BN_free(serial) }
        guard BN_rand(serial, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) == 1,
              BN_to_ASN1_INTEGER(serial, X509_get_serialNumber(x509)) != nil else { throw OpenSSLError.drain("serial number") }

        for (date, setter) in [(notBefore, X509_set1_notBefore), (notAfter, X509_set1_notAfter)] {
            guard let time = ASN1_TIME_set(nil, time_t(date.timeIntervalSince1970)) else { throw OpenSSLError.drain("ASN1_TIME_set") }
            defer { ASN1_TIME_free(time) }
            guard setter(x509, time) == 1 else { throw OpenSSLError.drain("validity") }
        }

        guard let name = X509_NAME_new() else { throw OpenSSLError.drain("X509_NAME_new") }
        defer { X509_NAME_free(name) }
        if let commonName, X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, commonName, -1, -1, 0) != 1 {
            throw OpenSSLError.drain("subject name")
        }
        guard X509_set_subject_name(x509, name) == 1,
              X509_set_issuer_name(x509, issuer.map { X509_get_subject_name($0.handle) } ?? name) == 1,
              X509_set_pubkey(x509, key.handle) == 1 else { throw OpenSSLError.drain("names and key") }

        var context = X509V3_CTX()
        X509V3_set_ctx(&context, issuer?.handle ?? x509, x509, nil, nil, 0)
        for (nid, value) in extensions {
            guard let ext = X509V3_EXT_conf_nid(nil, &context, nid, value) else { throw OpenSSLError.drain("extension \(value)") }
            defer { X509_EXTENSION_free(ext) }
            guard X509_add_ext(x509, ext, -1) == 1 else { throw OpenSSLError.drain("X509_add_ext") }
        }
        guard X509_sign(x509, issuerKey.handle, EVP_sha256()) > 0 else { throw OpenSSLError.drain("X509_sign") }
        // Parsed back from its DER: a built X509 re-encodes its whole to-be-signed part every
        // time it is serialized (every handshake that sends it), a parsed one keeps its bytes.
        return try Certificate(der: certificate.der)
    }
}

extension PrivateKey {
    /// The DER SubjectPublicKeyInfo of the public half: what a public-key pin hashes.
    public var subjectPublicKeyInfoDER: [UInt8] {
        derEncode { i2d_PUBKEY(handle, $0) }
    }

    /// Writes the key as PKCS#8 PEM to a file that must not exist yet, created with mode 0600
    /// (never widened by the umask, never replacing an existing key).
    public func writePEM(toNewFile path: String) throws {
        let descriptor = Glibc.open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw OpenSSLError(operation: "cannot create \(path)", messages: [String(cString: strerror(errno))])
        }
        let bytes = Array(pem.utf8)
        var written = 0
        var failure: Int32 = 0
        while written < bytes.count {
            let count = bytes[written...].withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                failure = errno
                break
            }
            written += count
        }
        if failure == 0 && fsync(descriptor) != 0 { failure = errno }
        if Glibc.close(descriptor) != 0 && failure == 0 { failure = errno }
        if failure != 0 {
            unlink(path)
            throw OpenSSLError(operation: "cannot write \(path)", messages: [String(cString: strerror(failure))])
        }
    }
}

extension KeyFileContents {
    /// SHA-256 of the DER SubjectPublicKeyInfo.
    public var publicKeySHA256: [UInt8] { SHA256.hash(subjectPublicKeyInfoDER) }

    /// Parses `bytes`; an encrypted private key is an error (its public half needs the passphrase).
    public static func parse(_ bytes: [UInt8]) throws -> KeyFileContents {
        if bytes.isPEM {
            if let key = readPEM(bytes, PEM_read_bio_PUBKEY) { return describe(key, wasPrivate: false) }
            if let key = readPEM(bytes, PEM_read_bio_PrivateKey) { return describe(key, wasPrivate: true) }
            let messages = drainErrorQueue()
            if String(decoding: bytes, as: UTF8.self).contains("ENCRYPTED") {
                throw OpenSSLError(operation: "an encrypted private key: give its public key or certificate instead", messages: [])
            }
            throw OpenSSLError(operation: "no PEM public or private key", messages: messages)
        }
        let parsed: (OpaquePointer, Bool)? = bytes.withUnsafeBufferPointer { buffer in
            guard let base = buffer.baseAddress else { return nil }
            var cursor: UnsafePointer<UInt8>? = base
            if let key = d2i_PUBKEY(nil, &cursor, buffer.count) {
                if cursor == base + buffer.count { return (key, false) }
                EVP_PKEY_free(key)
            }
            cursor = base
            if let key = d2i_AutoPrivateKey(nil, &cursor, buffer.count) {
                if cursor == base + buffer.count { return (key, true) }
                EVP_PKEY_free(key)
            }
            return nil
        }
        guard let (key, wasPrivate) = parsed else { throw OpenSSLError.drain("no DER public or private key") }
        _ = drainErrorQueue()
        return describe(key, wasPrivate: wasPrivate)
    }

    private typealias PEMReader = (OpaquePointer?, UnsafeMutablePointer<OpaquePointer?>?, (@convention(c) (UnsafeMutablePointer<CChar>?, Int32, Int32, UnsafeMutableRawPointer?) -> Int32)?, UnsafeMutableRawPointer?) -> OpaquePointer?

    /// Reads one key with `reader`; a passphrase is never asked for (the callback refuses).
    private static func readPEM(_ bytes: [UInt8], _ reader: PEMReader) -> OpaquePointer? {
        bytes.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            return reader(bio, nil, { _, _, _, _ in -1 }, nil)
        }
    }

    /// Takes ownership of `key`, keeps its public half's DER, and frees it.
    private static func describe(_ key: OpaquePointer, wasPrivate: Bool) -> KeyFileContents {
        defer { EVP_PKEY_free(key) }
        let spki = derEncode { i2d_PUBKEY(key, $0) }
        var algorithm = EVP_PKEY_get0_type_name(key).map { String(cString: $0) } ?? "unknown"
        var group = [CChar](repeating: 0, count: 80)
        var length = 0
        if EVP_PKEY_get_group_name(key, &group, group.count, &length) == 1, length > 0 {
            let name = String(decoding: group.prefix(min(length, group.count)).map { UInt8(bitPattern: $0) }, as: UTF8.self)
            algorithm += " " + (name == "prime256v1" ? "P-256" : name == "secp384r1" ? "P-384" : name == "secp521r1" ? "P-521" : name)
        } else if algorithm == "RSA" {
            algorithm += " \(EVP_PKEY_get_bits(key))"
        }
        _ = drainErrorQueue()
        return KeyFileContents(wasPrivate: wasPrivate, subjectPublicKeyInfoDER: spki, algorithm: algorithm)
    }
}
