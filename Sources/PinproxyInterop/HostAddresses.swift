import Glibc

/// The addresses of this host's network interfaces (getifaddrs(3): one netlink dump, local and
/// quick): how the daemon tells a client on this host from one elsewhere.
public enum HostAddresses {
    /// Every IPv4 and IPv6 address of every interface, as the kernel lists them now.
    public static func current() -> Set<IPAddress> {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0 else { return [] }
        defer { freeifaddrs(list) }
        var addresses = Set<IPAddress>()
        var next = list
        while let entry = next {
            if let address = entry.pointee.ifa_addr, let socketAddress = SocketAddress(UnsafePointer(address)) {
                addresses.insert(socketAddress.address.unmapped)
            }
            next = entry.pointee.ifa_next
        }
        return addresses
    }

    /// Whether `address` is on this host for certain without asking: loopback (127.0.0.0/8, ::1).
    public static func isLoopback(_ address: IPAddress) -> Bool {
        let address = address.unmapped
        return address.isIPv6 ? address.bytes == [UInt8](repeating: 0, count: 15) + [1] : address.bytes[0] == 127
    }
}
