/// One GeneralName, as the rules need it.
public enum GeneralName: Sendable, Hashable {
    case dns(String)
    case ip([UInt8])
    /// Any other kind (email, URI, directory name …), with OpenSSL's GEN_* type.
    case other(Int32)
}

/// One subtree of a nameConstraints extension.
public struct GeneralSubtree: Sendable, Equatable {
    public let base: GeneralName
    /// Whether `minimum` is 0 and `maximum` absent: the only bounds RFC 5280 allows, and
    /// the only ones OpenSSL's checks accept.
    public let hasDefaultBounds: Bool

    public init(base: GeneralName, hasDefaultBounds: Bool = true) {
        self.base = base
        self.hasDefaultBounds = hasDefaultBounds
    }
}

/// A nameConstraints extension: each subtree list is nil when absent.
public struct NameConstraints: Sendable, Equatable {
    public let permitted: [GeneralSubtree]?
    public let excluded: [GeneralSubtree]?

    public init(permitted: [GeneralSubtree]?, excluded: [GeneralSubtree]?) {
        self.permitted = permitted
        self.excluded = excluded
    }
}

/// The nameConstraints extension as the certificate carries it.
public enum NameConstraintsExtension: Sendable, Equatable {
    case absent
    /// OpenSSL cannot decode it.
    case undecodable
    /// The certificate carries it more than once.
    case repeated
    case decoded(NameConstraints)

    /// The decoded extension; nil when absent, undecodable or repeated.
    public var constraints: NameConstraints? {
        if case .decoded(let constraints) = self { constraints } else { nil }
    }
}

extension Array where Element == GeneralName {
    /// The entries of type DNS and IP, as `DNS:name` and `IP:address`, for people.
    public var forPeople: [String] {
        compactMap { entry in
            switch entry {
            case .dns(let name): "DNS:" + name
            case .ip(let bytes): "IP:" + (IPAddress(bytes: bytes)?.description ?? "?")
            case .other: nil
            }
        }
    }
}
