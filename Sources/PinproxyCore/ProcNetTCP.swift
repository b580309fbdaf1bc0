/// The text of /proc/net/tcp and /proc/net/tcp6, read (`ListeningSockets` reads the files).
public enum ProcNetTCP {
    /// The inodes of the sockets `text` lists as listening on `address`'s port at that address,
    /// or at a wildcard address that covers it (or, for a wildcard `address`, at any address).
    public static func listeningInodes(in text: String, overlapping address: SocketAddress) -> Set<UInt64> {
        var found = Set<UInt64>()
        for line in text.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ")
            guard fields.count > 9, fields[3] == "0A",  // TCP_LISTEN
                  let local = parse(fields[1]), let inode = UInt64(fields[9]),
                  local.port == address.port else { continue }
            if local.address == address.address || isWildcard(local.address) || isWildcard(address.address) {
                found.insert(inode)
            }
        }
        return found
    }

    private static func isWildcard(_ address: IPAddress) -> Bool {
        address.bytes.allSatisfy { $0 == 0 }
    }

    /// `0100007F:0C38`: the address as 32-bit words in host byte order, then the port.
    static func parse(_ field: Substring) -> SocketAddress? {
        let parts = field.split(separator: ":")
        guard parts.count == 2, let port = UInt16(parts[1], radix: 16), parts[0].count == 8 || parts[0].count == 32 else { return nil }
        var bytes: [UInt8] = []
        var rest = parts[0]
        while !rest.isEmpty {
            guard let word = UInt32(rest.prefix(8), radix: 16) else { return nil }
            // Host order, as the kernel printed it: the word's bytes as they lie in memory.
            let stored = word.littleEndian
            bytes += [0, 8, 16, 24].map { UInt8(truncatingIfNeeded: stored >> $0) }
            rest = rest.dropFirst(8)
        }
        guard let ip = IPAddress(bytes: bytes) else { return nil }
        return SocketAddress(address: ip.unmapped, port: port)
    }
}
