import Glibc
import FoundationEssentials
import CPinproxyShims
import PinproxyCore

extension SocketAddress {
    /// Calls `body` with a pointer to the C sockaddr and its length.
    func withSockaddr<T>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> T) -> T {
        if address.isIPv6 {
            var storage = sockaddr_in6()
            storage.sin6_family = sa_family_t(AF_INET6)
            storage.sin6_port = port.bigEndian
            withUnsafeMutableBytes(of: &storage.sin6_addr) { $0.copyBytes(from: address.bytes) }
            return withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        }
        var storage = sockaddr_in()
        storage.sin_family = sa_family_t(AF_INET)
        storage.sin_port = port.bigEndian
        withUnsafeMutableBytes(of: &storage.sin_addr) { $0.copyBytes(from: address.bytes) }
        return withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
    }

    /// Reads a C sockaddr (IPv4 or IPv6); nil for other families.
    init?(_ pointer: UnsafePointer<sockaddr>) {
        switch Int32(pointer.pointee.sa_family) {
        case AF_INET:
            let v4 = UnsafeRawPointer(pointer).load(as: sockaddr_in.self)
            var addr = v4.sin_addr
            guard let address = IPAddress(bytes: withUnsafeBytes(of: &addr) { Array($0) }) else { return nil }
            self.init(address: address, port: UInt16(bigEndian: v4.sin_port))
        case AF_INET6:
            let v6 = UnsafeRawPointer(pointer).load(as: sockaddr_in6.self)
            var addr = v6.sin6_addr
            guard let address = IPAddress(bytes: withUnsafeBytes(of: &addr) { Array($0) }) else { return nil }
            self.init(address: address, port: UInt16(bigEndian: v6.sin6_port))
        default:
            return nil
        }
    }
}
