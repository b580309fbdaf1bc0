import COpenSSL
import CPinproxyShims
import PinproxyCore

// MARK: - The names a certificate carries: its subject's commonNames, its subjectAltName, and
// the nameConstraints it sets on the certificates below it

extension Certificate {
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

    /// subjectAltName entries of type DNS and IP, as `DNS:name` and `IP:address`, for people.
    public var subjectAlternativeNames: [String] {
        subjectAltNameEntries.forPeople
    }

    /// The nameConstraints extension, decoded.
    public var nameConstraintsExtension: NameConstraintsExtension {
        var found: Int32 = 0  // -1: absent; -2: more than one; else the criticality
        guard let raw = X509_get_ext_d2i(handle, NID_name_constraints, &found, nil) else {
            _ = drainErrorQueue()
            switch found {
            case -1: return .absent
            case -2: return .repeated
            default: return .undecodable
            }
        }
        let constraints = raw.assumingMemoryBound(to: NAME_CONSTRAINTS.self)
        defer { NAME_CONSTRAINTS_free(constraints) }
        func subtrees(_ stack: OpaquePointer?) -> [GeneralSubtree]? {
            guard let stack else { return nil }
            return (0..<OPENSSL_sk_num(stack)).compactMap { index in
                guard let subtree = OPENSSL_sk_value(stack, index)?.assumingMemoryBound(to: GENERAL_SUBTREE.self),
                      let base = subtree.pointee.base else { return nil }
                return GeneralSubtree(base: Self.generalName(base), hasDefaultBounds: Self.hasDefaultBounds(subtree))
            }
        }
        return .decoded(NameConstraints(permitted: subtrees(constraints.pointee.permittedSubtrees),
                                        excluded: subtrees(constraints.pointee.excludedSubtrees)))
    }

    /// The nameConstraints extension; nil when absent, undecodable or repeated.
    public var nameConstraints: NameConstraints? {
        nameConstraintsExtension.constraints
    }

    /// No maximum, and a minimum that is absent or 0.
    private static func hasDefaultBounds(_ subtree: UnsafeMutablePointer<GENERAL_SUBTREE>) -> Bool {
        guard subtree.pointee.maximum == nil else { return false }
        guard let minimum = subtree.pointee.minimum else { return true }
        var value: Int64 = 0
        guard ASN1_INTEGER_get_int64(&value, minimum) == 1 else {
            _ = drainErrorQueue()
            return false
        }
        return value == 0
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
}
