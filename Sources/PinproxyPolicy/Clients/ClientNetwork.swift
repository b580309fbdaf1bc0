import PinproxyCore

/// The network of a `[clients."net:CIDR"]` section: the clients whose traffic this host
/// forwards (containers, VMs, a LAN behind it), known by their source address.
public struct ClientNetwork: Hashable, Sendable, CustomStringConvertible {
    /// The network's first address: its host bits are zero.
    public let prefix: IPAddress
    /// The prefix length in bits: 0 to 32 for IPv4, 0 to 128 for IPv6.
    public let length: Int

    /// `ADDRESS/LENGTH` as written after `net:`, or why it is not a network.
    public static func parse(_ text: String) -> Result<ClientNetwork, ClientSelectorError> {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let address = IPAddress(String(parts[0])) else {
            return .failure(.init("net: takes a network as ADDRESS/LENGTH, such as net:172.17.0.0/16 or net:fd00:d0c::/64"))
        }
        let bits = address.bytes.count * 8
        guard !parts[1].isEmpty, parts[1].utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
              parts[1] == "0" || !parts[1].hasPrefix("0"), let length = Int(parts[1]), length <= bits else {
            return .failure(.init("net:\(text): the prefix length must be a number from 0 to \(bits) for an IPv\(address.isIPv6 ? 6 : 4) network"))
        }
        let network = ClientNetwork(prefix: Self.masked(address, length), length: length)
        guard network.prefix == address else {
            return .failure(.init("net:\(text): \(address) has host bits set below the /\(length) prefix: write net:\(network)"))
        }
        return .success(network)
    }

    private init(prefix: IPAddress, length: Int) {
        self.prefix = prefix
        self.length = length
    }

    /// Whether `address` lies in the network (an IPv4-mapped IPv6 address as the IPv4 one).
    public func contains(_ address: IPAddress) -> Bool {
        let address = address.unmapped
        return address.bytes.count == prefix.bytes.count && Self.masked(address, length) == prefix
    }

    /// `172.17.0.0/16`.
    public var description: String { "\(prefix)/\(length)" }

    private static func masked(_ address: IPAddress, _ length: Int) -> IPAddress {
        var bits = length
        let bytes = address.bytes.map { byte -> UInt8 in
            defer { bits = max(0, bits - 8) }
            return bits >= 8 ? byte : byte & ~(0xFF >> UInt8(bits))
        }
        return IPAddress(bytes: bytes)!  // Same length as `address`: 4 or 16 bytes.
    }
}
