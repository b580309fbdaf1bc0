import PinproxyCore
import PinproxyInterop

extension Certificate {
    /// Whether this (CA) certificate's name constraints, if any, permit the DNS name `host` (a
    /// name `TargetHost` accepted). OpenSSL checks constraints against the names a certificate
    /// carries, so a leaf whose `*.example.com` covers an excluded `bar.example.com` passes
    /// verification; this checks the host the client actually asked for, by the rules of
    /// OpenSSL's own matcher (`NameConstraints.permit`). A nameConstraints extension that cannot
    /// be decoded, or that appears twice, permits nothing.
    public func nameConstraintsPermit(dnsName host: String) -> Bool {
        switch nameConstraintsExtension {
        case .absent: true
        case .undecodable, .repeated: false
        case .decoded(let constraints): constraints.permit(dnsName: host)
        }
    }
}

extension NameConstraints {
    /// The most subtrees checked against one name (OpenSSL's NAME_CHECK_MAX): more permit nothing.
    static let subtreeLimit = 1 << 20

    /// Whether these constraints permit a certificate that names only the DNS name `host`, as
    /// OpenSSL's NAME_CONSTRAINTS_check decides (RFC 5280 4.2.1.10): if any permitted subtree is
    /// a DNS name, one of them must match; no excluded DNS subtree may match; a DNS subtree with
    /// bounds other than the default makes the check fail. Subtrees of other kinds do not apply.
    func permit(dnsName host: String) -> Bool {
        let permitted = permitted ?? [], excluded = excluded ?? []
        guard !host.isEmpty, permitted.count + excluded.count <= Self.subtreeLimit else { return false }
        let permittedNames = permitted.compactMap(\.dnsBase)
        let excludedNames = excluded.compactMap(\.dnsBase)
        guard permittedNames.allSatisfy(\.hasDefaultBounds), excludedNames.allSatisfy(\.hasDefaultBounds) else { return false }
        if !permittedNames.isEmpty, !permittedNames.contains(where: { Self.dnsName(host, isWithin: $0.name) }) { return false }
        return !excludedNames.contains { Self.dnsName(host, isWithin: $0.name) }
    }

    /// Whether `name` is within the DNS subtree `base` (OpenSSL's nc_dns): an empty base holds
    /// every name; otherwise `name` ends with `base` (ASCII letters compared without case) and is
    /// either equal to it, or one label or more longer (the byte before it a period, or `base`
    /// starting with one).
    static func dnsName(_ name: String, isWithin base: String) -> Bool {
        let name = Array(name.utf8), base = Array(base.utf8)
        guard let first = base.first else { return true }
        guard name.count >= base.count else { return false }
        let start = name.count - base.count
        if start > 0, first != UInt8(ascii: "."), name[start - 1] != UInt8(ascii: ".") { return false }
        return zip(name[start...], base).allSatisfy { asciiLowercased($0) == asciiLowercased($1) }
    }

    private static func asciiLowercased(_ byte: UInt8) -> UInt8 {
        (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte + 0x20 : byte
    }
}

extension GeneralSubtree {
    /// The subtree's DNS name and whether its bounds are the default; nil for other kinds.
    fileprivate var dnsBase: (name: String, hasDefaultBounds: Bool)? {
        if case .dns(let name) = base { (name, hasDefaultBounds) } else { nil }
    }
}
