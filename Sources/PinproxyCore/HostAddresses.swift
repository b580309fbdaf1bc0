/// The addresses of this host's network interfaces (getifaddrs(3): one netlink dump, local and
/// quick): how the daemon tells a client on this host from one elsewhere. Interop lists them
/// (`HostAddresses.current`).
public enum HostAddresses {
    /// Whether `address` is on this host for certain without asking: loopback (127.0.0.0/8, ::1).
    public static func isLoopback(_ address: IPAddress) -> Bool {
        let address = address.unmapped
        return address.isIPv6 ? address.bytes == [UInt8](repeating: 0, count: 15) + [1] : address.bytes[0] == 127
    }
}
