import Glibc
import PinproxyCore

extension HostAddresses {
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
}
