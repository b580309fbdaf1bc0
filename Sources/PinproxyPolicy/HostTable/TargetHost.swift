import PinproxyCore
import PinproxyInterop

/// A destination host as a client names it: a DNS name (lower-case LDH, no trailing dot)
/// or an IP literal.
public enum TargetHost: Hashable, Sendable, CustomStringConvertible {
    case name(String)
    case ip(IPAddress)

    /// Parses and normalises a host: lower-cases, drops one trailing dot, accepts IPv6 with or
    /// without brackets (an IPv4-mapped one is its IPv4 address, so it meets the same entry),
    /// and rejects anything that is not LDH ASCII or an IP literal.
    public init?(_ text: String) {
        if let address = IPAddress(text) {
            self = .ip(address.unmapped)
            return
        }
        guard let name = TargetHost.normaliseName(text) else { return nil }
        self = .name(name)
    }

    /// The host as it appears in logs and in `host:port`: IPv6 in brackets.
    public var description: String {
        switch self {
        case .name(let name): return name
        case .ip(let address): return address.hostLiteral
        }
    }

    /// The name to send as SNI; IP literals have none.
    public var serverName: String? {
        if case .name(let name) = self { return name }
        return nil
    }

    /// Lower-cases and validates a DNS name: labels of 1–63 letters, digits and inner hyphens,
    /// at most 253 characters, not all-numeric in its last label (that would be a bad IP).
    static func normaliseName<Text: StringProtocol>(_ text: Text) -> String? {
        // Most names are already lower-case without a trailing dot: checked without a copy.
        if !text.hasSuffix("."), !text.utf8.contains(where: { (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) }) {
            return isLDHName(text.utf8) ? String(text) : nil
        }
        var bytes = Array(text.utf8)
        if bytes.last == UInt8(ascii: ".") { bytes.removeLast() }
        for index in bytes.indices where (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(bytes[index]) { bytes[index] += 0x20 }
        return isLDHName(bytes) ? String(decoding: bytes, as: UTF8.self) : nil
    }

    /// Labels of 1–63 lower-case letters, digits and inner hyphens, at most 253 bytes, the last
    /// label not all digits.
    private static func isLDHName<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> Bool {
        guard !bytes.isEmpty, bytes.count <= 253 else { return false }
        var labelLength = 0
        var labelAllDigits = true
        var previous: UInt8 = 0
        for byte in bytes {
            if byte == UInt8(ascii: ".") {
                guard labelLength > 0, previous != UInt8(ascii: "-") else { return false }
                labelLength = 0
                labelAllDigits = true
            } else {
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"):
                    labelAllDigits = false
                case UInt8(ascii: "-"):
                    guard labelLength > 0 else { return false }
                    labelAllDigits = false
                case UInt8(ascii: "0")...UInt8(ascii: "9"):
                    break
                default:
                    return false
                }
                labelLength += 1
                guard labelLength <= 63 else { return false }
            }
            previous = byte
        }
        return labelLength > 0 && previous != UInt8(ascii: "-") && !labelAllDigits
    }
}

/// A `[hosts."PATTERN"]` key: an exact name, `*.` plus a name (exactly one more label),
/// or an IP literal.
public enum HostPattern: Hashable, Sendable, CustomStringConvertible {
    case exact(String)
    case wildcard(parent: String)
    case ip(IPAddress)

    /// Parses and normalises a pattern like a host name; nil when it is not valid.
    public init?(_ text: String) {
        if text.hasPrefix("*.") {
            guard let parent = TargetHost.normaliseName(text.dropFirst(2)) else { return nil }
            self = .wildcard(parent: parent)
            return
        }
        switch TargetHost(text) {
        case .name(let name): self = .exact(name)
        case .ip(let address): self = .ip(address)
        case nil: return nil
        }
    }

    public var description: String {
        switch self {
        case .exact(let name): return name
        case .wildcard(let parent): return "*." + parent
        case .ip(let address): return address.description
        }
    }
}
