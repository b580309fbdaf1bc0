/// An IPv4 or IPv6 address in binary form. Its text forms are the C library's (`inet_pton`,
/// `inet_ntop`), written out in Swift (`IPAddressText`).
public struct IPAddress: Hashable, Sendable, CustomStringConvertible {
    /// 4 bytes for IPv4, 16 for IPv6.
    public let bytes: [UInt8]

    /// Wraps 4 or 16 raw bytes.
    public init?(bytes: [UInt8]) {
        guard bytes.count == 4 || bytes.count == 16 else { return nil }
        self.bytes = bytes
    }

    /// Parses a literal: dotted IPv4, or IPv6 with or without brackets (no zone index).
    public init?(_ text: String) {
        // A name (no colon, and more than digits and dots) is neither form: nothing to copy.
        if !text.utf8.contains(UInt8(ascii: ":")),
           !text.utf8.allSatisfy({ $0 == UInt8(ascii: ".") || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) {
            return nil
        }
        var literal = Substring(text)
        if literal.hasPrefix("[") && literal.hasSuffix("]") {
            literal = literal.dropFirst().dropLast()
            guard literal.contains(":") else { return nil }
        }
        let text = Array(literal.utf8)
        guard let bytes = text.contains(UInt8(ascii: ":")) ? IPAddressText.parseIPv6(text[...]) : IPAddressText.parseIPv4(text[...]) else {
            return nil
        }
        self.bytes = bytes
    }

    /// True for IPv6.
    public var isIPv6: Bool { bytes.count == 16 }

    /// The IPv4 address an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) stands for; any other
    /// address unchanged.
    public var unmapped: IPAddress {
        guard isIPv6, bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF else { return self }
        return IPAddress(bytes: Array(bytes[12..<16])) ?? self
    }

    /// The canonical text form (RFC 5952 for IPv6), without brackets.
    public var description: String {
        isIPv6 ? IPAddressText.formatIPv6(bytes) : IPAddressText.formatIPv4(bytes[...])
    }

    /// The form used in `host:port` text: IPv6 in brackets.
    public var hostLiteral: String { isIPv6 ? "[\(description)]" : description }
}

/// One address block: a prefix and its length in bits.
public struct AddressBlock: Sendable, CustomStringConvertible {
    public let prefix: IPAddress
    public let length: Int
    /// What the block is for, as the registry names it.
    public let name: String

    /// `cidr` is `address/length`; a malformed one is a programming error.
    package init(_ cidr: String, _ name: String) {
        let parts = cidr.split(separator: "/")
        // Unreachable: every block is a literal of `IPAddress.specialPurposeIPv4`/`IPv6`, each read by SpecialPurposeAddressTests.
        self.prefix = IPAddress(String(parts[0]))!
        self.length = Int(parts[1])!
        self.name = name
    }

    /// Whether `address` (of the same family) lies in the block.
    public func contains(_ address: IPAddress) -> Bool {
        guard address.bytes.count == prefix.bytes.count else { return false }
        var bits = length
        for (a, p) in zip(address.bytes, prefix.bytes) where bits > 0 {
            let mask: UInt8 = bits >= 8 ? 0xFF : ~(0xFF >> UInt8(bits))
            if a & mask != p & mask { return false }
            bits -= 8
        }
        return true
    }

    public var description: String { "\(prefix)/\(length) (\(name))" }
}
