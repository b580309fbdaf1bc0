import Glibc
import Foundation
import COpenSSL
import CPinproxyShims

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

    /// Parses a PEM private key (PKCS#8 or traditional, unencrypted).
    public convenience init(pem: [UInt8]) throws {
        let parsed: OpaquePointer? = pem.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PrivateKey(bio, nil, nil, nil)
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

/// Issues the certificates of pinproxy's local interception CA.
public enum CertificateBuilder {
    /// The name a minted leaf is for.
    public enum SubjectName: Sendable {
        case dns(String)
        case ip(IPAddress)
    }

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
        return certificate
    }
}
