import COpenSSL
import CPinproxyShims
import PinproxyCore

// MARK: - The extensions the web-PKI rules read (Sources/PinproxyPolicy/WebPKI), through OpenSSL's accessors

extension CertificateExtension {
    /// The extension's OpenSSL NID.
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

extension Certificate {
    /// Whether `ext` is marked critical; nil when the certificate does not carry it.
    public func criticality(of ext: CertificateExtension) -> Bool? {
        let index = X509_get_ext_by_NID(handle, ext.nid, -1)
        guard index >= 0, let found = X509_get_ext(handle, index) else { return nil }
        return X509_EXTENSION_get_critical(found) != 0
    }

    /// OpenSSL's cached extension flags (EXFLAG_*); computing them decodes the extensions once.
    private var extensionFlags: UInt32 { X509_get_extension_flags(handle) }

    /// The basicConstraints extension; nil when absent.
    public var basicConstraints: BasicConstraints? {
        guard extensionFlags & UInt32(EXFLAG_BCONS) != 0 else { return nil }
        let pathLength = X509_get_pathlen(handle)
        return BasicConstraints(isCA: extensionFlags & UInt32(EXFLAG_CA) != 0, pathLength: pathLength >= 0 ? Int(pathLength) : nil)
    }

    /// The keyUsage extension; nil when absent.
    public var keyUsage: KeyUsage? {
        guard extensionFlags & UInt32(EXFLAG_KUSAGE) != 0 else { return nil }
        return KeyUsage(rawValue: X509_get_key_usage(handle))
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

    /// The authorityKeyIdentifier extension; nil when absent.
    public var authorityKeyIdentifier: AuthorityKeyIdentifier? {
        guard criticality(of: .authorityKeyIdentifier) != nil else { return nil }
        _ = extensionFlags
        return AuthorityKeyIdentifier(keyIdentifier: X509_get0_authority_key_id(handle).map { Self.bytes(of: $0) },
                                      hasAuthorityCertIssuer: X509_get0_authority_issuer(handle) != nil,
                                      hasAuthorityCertSerialNumber: X509_get0_authority_serial(handle) != nil)
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

    /// An ASN.1 string's bytes (none for nil).
    static func bytes(of string: UnsafePointer<ASN1_STRING>?) -> [UInt8] {
        guard let string, let data = ASN1_STRING_get0_data(string) else { return [] }
        return Array(UnsafeBufferPointer(start: data, count: Int(ASN1_STRING_length(string))))
    }
}

extension Certificate {
    /// The caIssuers locations of the authorityInfoAccess extension that are URIs (where the
    /// issuer's certificate may be fetched), as written; none when absent or undecodable.
    public var caIssuersURIs: [String] {
        guard let raw = X509_get_ext_d2i(handle, NID_info_access, nil, nil) else {
            _ = drainErrorQueue()
            return []
        }
        let descriptions = OpaquePointer(raw)
        defer { AUTHORITY_INFO_ACCESS_free(descriptions) }
        return (0..<OPENSSL_sk_num(descriptions)).compactMap { index in
            guard let access = OPENSSL_sk_value(descriptions, index)?.assumingMemoryBound(to: ACCESS_DESCRIPTION.self),
                  OBJ_obj2nid(access.pointee.method) == NID_ad_ca_issuers,
                  let location = access.pointee.location, location.pointee.type == GEN_URI else { return nil }
            return String(decoding: Self.bytes(of: location.pointee.d.uniformResourceIdentifier), as: UTF8.self)
        }
    }
}
