import Glibc
import CPinproxyShims  // owns SOCK_STREAM once a compile job has loaded it (see Descriptor.swift)
import PinproxyCore

/// Whether this network namespace can bind IPv6 loopback, asked the way the daemon would bind
/// its `[::1]` transparent listener.
public enum LoopbackProbe {
    /// Whether `[::1]` can be bound (a probe on an ephemeral port, closed at once); false where
    /// IPv6 is off at boot, on every interface or on `lo` (`EAFNOSUPPORT`, `EADDRNOTAVAIL`).
    public static var ipv6Available: Bool {
        let fd = socket(AF_INET6, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return errno != EAFNOSUPPORT }
        defer { close(fd) }
        var on: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &on, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in6()
        address.sin6_family = sa_family_t(AF_INET6)
        address.sin6_addr = in6addr_loopback
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
        }
        return bound == 0 || (errno != EADDRNOTAVAIL && errno != EAFNOSUPPORT)
    }
}
