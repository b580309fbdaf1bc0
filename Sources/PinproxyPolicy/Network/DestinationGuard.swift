import PinproxyCore

/// Which destination addresses `block_private_destinations` refuses.
public enum DestinationGuard {
    /// True for every address of the IANA IPv4 and IPv6 special-purpose registries, multicast
    /// and reserved blocks, and IPv6 forms that embed such an IPv4 address: see
    /// `IPAddress.specialPurposeBlock`.
    public static func isPrivate(_ address: IPAddress) -> Bool {
        address.specialPurposeBlock != nil
    }
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
