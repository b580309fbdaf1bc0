import COpenSSL
import CPinproxyShims

// MARK: - The extensions the web-PKI rules read (Sources/PinproxyPolicy/WebPKI), through OpenSSL's accessors

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
