import Glibc
import CPinproxyShims  // owns SOCK_STREAM once a compile job has loaded it (see Descriptor.swift)
import FoundationEssentials
import PinproxyCore

/// A listening TCP socket bound without `SO_REUSEPORT`: while it listens, no other socket can
/// bind its address, not even one of the same user that sets `SO_REUSEPORT` itself. The egress
/// lock's transparent listeners are bound this way, once, and every worker accepts on a
/// duplicate (`Listener(loop:listeningSocket:)`).
public enum ExclusiveListener {
    /// Binds and listens on `address` (IPv6 addresses with `IPV6_V6ONLY`), close-on-exec.
    ///
    /// - Returns: the socket; the caller owns it.
    /// - Throws: the failing call and its errno (`EACCES` for a privileged port without
    ///   `CAP_NET_BIND_SERVICE`; `EAFNOSUPPORT` or `EADDRNOTAVAIL` where IPv6 is off).
    public static func bind(_ address: SocketAddress, backlog: Int32 = 1024) throws(SystemError) -> Int32 {
        let family = address.address.isIPv6 ? AF_INET6 : AF_INET
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SystemError("socket", errno) }
        var on: Int32 = 1
        // SO_REUSEADDR only lets a restart bind over connections in TIME_WAIT: on Linux it never
        // lets a second socket bind an address that a socket listens on.
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        if family == AF_INET6 {
            _ = setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &on, socklen_t(MemoryLayout<Int32>.size))
        }
        let bound = address.withSockaddr { Glibc.bind(fd, $0, $1) }
        guard bound == 0 else {
            let code = errno
            Glibc.close(fd)
            throw SystemError("bind", code)
        }
        guard listen(fd, backlog) == 0 else {
            let code = errno
            Glibc.close(fd)
            throw SystemError("listen", code)
        }
        return fd
    }

    /// Whether `error` says the address family cannot be used here (IPv6 disabled at boot, on
    /// every interface, or on `lo`), rather than that the address is taken or forbidden.
    public static func familyUnavailable(_ error: SystemError) -> Bool {
        error.code == EAFNOSUPPORT || error.code == EADDRNOTAVAIL
    }

    /// Whether this network namespace has `::1` on `lo`, as `/proc/net/if_inet6` lists it: the
    /// file is missing under `ipv6.disable=1`, and `::1` is gone where `disable_ipv6` is set
    /// (for all interfaces or `lo`). Read rather than probed with a socket, which a sandbox
    /// (`RestrictAddressFamilies=`) or a privileged port would make fail for other reasons.
    public static var loopbackIPv6Available: Bool {
        guard let text = ProcFile.readText("/proc/net/if_inet6") else { return false }
        return text.split(separator: "\n").contains { $0.hasPrefix("00000000000000000000000000000001 ") }
    }
}
