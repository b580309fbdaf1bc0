import Glibc
import CPinproxyShims
import PinproxyCore

extension ConnectionAddresses {
    /// Reads both from `socket`: SO_ORIGINAL_DST at SOL_IP for IPv4, IP6T_SO_ORIGINAL_DST at
    /// SOL_IPV6 for IPv6 (and SOL_IP again for an IPv4-mapped peer of an IPv6 socket).
    public init(socket: Int32) {
        let local = SocketAddress.local(of: socket)
        guard let local, local.address.isIPv6 else {
            self.init(local: local, original: Self.original(socket, level: Int32(SOL_IP), option: pp_SO_ORIGINAL_DST()))
            return
        }
        let v6 = Self.original(socket, level: Int32(SOL_IPV6), option: pp_IP6T_SO_ORIGINAL_DST())
        if case .failure = v6, local.address.unmapped != local.address {
            self.init(local: local, original: Self.original(socket, level: Int32(SOL_IP), option: pp_SO_ORIGINAL_DST()))
        } else {
            self.init(local: local, original: v6)
        }
    }

    private static func original(_ socket: Int32, level: Int32, option: Int32) -> Result<SocketAddress, SystemError> {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let status = withUnsafeMutablePointer(to: &storage) { getsockopt(socket, level, option, $0, &length) }
        guard status == 0 else { return .failure(SystemError("getsockopt(SO_ORIGINAL_DST)", errno)) }
        let address = withUnsafePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { SocketAddress($0) } }
        guard let address else { return .failure(SystemError("getsockopt(SO_ORIGINAL_DST)", EAFNOSUPPORT)) }
        return .success(SocketAddress(address: address.address.unmapped, port: address.port))
    }
}

extension SocketAddress {
    /// The address `socket` is bound to (getsockname); nil when it has none.
    public static func local(of socket: Int32) -> SocketAddress? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        return withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                getsockname(socket, address, &length) == 0 ? SocketAddress(address) : nil
            }
        }
    }
}
