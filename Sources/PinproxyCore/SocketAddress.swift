/// An IP address and port (Interop turns it into a C `sockaddr_in` / `sockaddr_in6` and back).
public struct SocketAddress: Sendable, Hashable, CustomStringConvertible {
    public let address: IPAddress
    public let port: UInt16

    public init(address: IPAddress, port: UInt16) {
        self.address = address
        self.port = port
    }

    /// `127.0.0.1:443` or `[::1]:443`.
    public var description: String { "\(address.hostLiteral):\(port)" }
}
