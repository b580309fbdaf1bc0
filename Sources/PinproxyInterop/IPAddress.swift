import Glibc
import Foundation

/// An IPv4 or IPv6 address in binary form, parsed and printed by the C library.
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
        var literal = Substring(text)
        if literal.hasPrefix("[") && literal.hasSuffix("]") {
            literal = literal.dropFirst().dropLast()
            guard literal.contains(":") else { return nil }
        }
        // inet_pton reads IPv4 as digits and dots only, and IPv6 always has a colon: a host
        // name (the common case) is turned away without a call. C would end the text at a NUL.
        guard !literal.utf8.contains(0) else { return nil }
        if literal.utf8.contains(UInt8(ascii: ":")) {
            var v6 = in6_addr()
            guard inet_pton(AF_INET6, String(literal), &v6) == 1 else { return nil }
            self.bytes = withUnsafeBytes(of: &v6) { Array($0) }
        } else {
            guard literal.utf8.allSatisfy({ $0 == UInt8(ascii: ".") || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else { return nil }
            var v4 = in_addr()
            guard inet_pton(AF_INET, String(literal), &v4) == 1 else { return nil }
            self.bytes = withUnsafeBytes(of: &v4) { Array($0) }
        }
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
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let family = isIPv6 ? AF_INET6 : AF_INET
        bytes.withUnsafeBytes { raw in
            _ = inet_ntop(family, raw.baseAddress, &buffer, socklen_t(buffer.count))
        }
        return string(fromNulTerminated: buffer)
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
    init(_ cidr: String, _ name: String) {
        let parts = cidr.split(separator: "/")
        // Unreachable: every block is a literal of `specialPurposeIPv4`/`IPv6`, each read by SpecialPurposeAddressTests.
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

extension IPAddress {
    /// Every entry of the IANA IPv4 Special-Purpose Address Registry (RFC 6890 and its
    /// updates, as of 2025), plus multicast (224.0.0.0/4, its own registry). Entries marked
    /// "globally reachable" there (AS112, AMT, the PCP and TURN anycast addresses) are
    /// infrastructure no HTTPS host lives on, and are listed too.
    public static let specialPurposeIPv4: [AddressBlock] = [
        AddressBlock("0.0.0.0/8", "this network"),
        AddressBlock("10.0.0.0/8", "private use"),
        AddressBlock("100.64.0.0/10", "shared address space"),
        AddressBlock("127.0.0.0/8", "loopback"),
        AddressBlock("169.254.0.0/16", "link local"),
        AddressBlock("172.16.0.0/12", "private use"),
        AddressBlock("192.0.0.0/24", "IETF protocol assignments"),
        AddressBlock("192.0.2.0/24", "documentation (TEST-NET-1)"),
        AddressBlock("192.31.196.0/24", "AS112-v4"),
        AddressBlock("192.52.193.0/24", "AMT"),
        AddressBlock("192.88.99.0/24", "deprecated 6to4 relay anycast"),
        AddressBlock("192.168.0.0/16", "private use"),
        AddressBlock("192.175.48.0/24", "direct delegation AS112 service"),
        AddressBlock("198.18.0.0/15", "benchmarking"),
        AddressBlock("198.51.100.0/24", "documentation (TEST-NET-2)"),
        AddressBlock("203.0.113.0/24", "documentation (TEST-NET-3)"),
        AddressBlock("224.0.0.0/4", "multicast"),
        AddressBlock("240.0.0.0/4", "reserved"),
        AddressBlock("255.255.255.255/32", "limited broadcast"),
    ]

    /// Every entry of the IANA IPv6 Special-Purpose Address Registry (as of 2025), plus
    /// multicast (ff00::/8), the deprecated site-local fec0::/10 and IPv4-compatible ::/96,
    /// and last everything outside 2000::/3, the only space IANA allocates for global unicast.
    /// The blocks that embed an IPv4 address a packet may reach (IPv4-mapped, SIIT, the
    /// well-known NAT64 prefix, 6to4) are not listed: `specialPurposeBlock` judges the
    /// embedded IPv4 address instead.
    public static let specialPurposeIPv6: [AddressBlock] = [
        AddressBlock("::/96", "unspecified, loopback and IPv4-compatible"),
        AddressBlock("64:ff9b:1::/48", "local-use IPv4/IPv6 translation"),
        AddressBlock("100::/64", "discard-only"),
        AddressBlock("100:0:0:1::/64", "dummy IPv6 prefix"),
        AddressBlock("2001::/23", "IETF protocol assignments (Teredo, benchmarking, ORCHID, ...)"),
        AddressBlock("2001:db8::/32", "documentation"),
        AddressBlock("2620:4f:8000::/48", "direct delegation AS112 service"),
        AddressBlock("3fff::/20", "documentation"),
        AddressBlock("5f00::/16", "segment routing SIDs"),
        AddressBlock("fc00::/7", "unique local"),
        AddressBlock("fe80::/10", "link-local unicast"),
        AddressBlock("fec0::/10", "deprecated site-local"),
        AddressBlock("ff00::/8", "multicast"),
        AddressBlock("::/3", "not global unicast (reserved)"),
        AddressBlock("4000::/2", "not global unicast (reserved)"),
        AddressBlock("8000::/1", "not global unicast (reserved)"),
    ]

    /// The special-purpose or non-unicast block this address lies in, nil for an ordinary
    /// global unicast address. An IPv6 address that embeds an IPv4 one (IPv4-mapped
    /// `::ffff:0:0/96`, SIIT `::ffff:0:0:0/96`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) is judged
    /// by that IPv4 address.
    public var specialPurposeBlock: AddressBlock? {
        guard isIPv6 else { return Self.specialPurposeIPv4.first { $0.contains(self) } }
        if let embedded = embeddedIPv4 { return embedded.specialPurposeBlock }
        return Self.specialPurposeIPv6.first { $0.contains(self) }
    }

    /// The IPv4 address inside an IPv4-mapped, SIIT, NAT64 (64:ff9b::/96) or 6to4 address.
    private var embeddedIPv4: IPAddress? {
        let b = bytes
        let v4Tail = IPAddress(bytes: Array(b[12..<16]))
        if b[0..<10].allSatisfy({ $0 == 0 }) && b[10] == 0xFF && b[11] == 0xFF { return v4Tail }     // ::ffff:a.b.c.d
        if b[0..<8].allSatisfy({ $0 == 0 }) && b[8] == 0xFF && b[9] == 0xFF && b[10] == 0 && b[11] == 0 { return v4Tail }  // ::ffff:0:a.b.c.d
        if b[0..<4] == [0x00, 0x64, 0xFF, 0x9B] && b[4..<12].allSatisfy({ $0 == 0 }) { return v4Tail }  // 64:ff9b::a.b.c.d
        if b[0] == 0x20 && b[1] == 0x02 { return IPAddress(bytes: Array(b[2..<6])) }                     // 2002:AABB:CCDD::/48
        return nil
    }
}
