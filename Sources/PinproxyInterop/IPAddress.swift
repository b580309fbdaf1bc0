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
        return IPAddress(bytes: Array(bytes[12..<16]))!
    }

    /// The canonical text form (RFC 5952 for IPv6), without brackets.
    public var description: String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let family = isIPv6 ? AF_INET6 : AF_INET
        bytes.withUnsafeBytes { raw in
            _ = inet_ntop(family, raw.baseAddress, &buffer, socklen_t(buffer.count))
        }
        return String(cString: buffer)
    }

    /// The form used in `host:port` text: IPv6 in brackets.
    public var hostLiteral: String { isIPv6 ? "[\(description)]" : description }
}
