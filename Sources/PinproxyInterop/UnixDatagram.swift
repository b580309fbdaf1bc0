import Glibc
// For the socket constants (`MSG_NOSIGNAL` is owned by whichever of these C modules a compile
// job loads first); see the note in Descriptor.swift.
import CPinproxyShims
import CLibevent
import COpenSSL
import PinproxyCore

/// One `AF_UNIX` datagram to an address that is either a filesystem path (`/run/x`) or, with a
/// leading `@`, a name in the Linux abstract namespace.
///
/// Each send opens a fresh `SOCK_DGRAM | SOCK_CLOEXEC` socket, sends once and closes it, so it
/// holds no state and may be called from any thread. It never blocks (MSG_DONTWAIT): a reader
/// whose queue is full loses that datagram rather than stall an event loop.
public enum UnixDatagram {
    /// Sends `bytes` as one datagram to `address`.
    public static func send(_ bytes: [UInt8], to address: String) throws(UnixDatagramError) {
        var storage = sockaddr_un()
        let length = try fill(&storage, with: address)

        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .system(call: "socket", errno: errno) }
        defer { close(fd) }

        var sent: Int
        repeat {
            sent = bytes.withUnsafeBytes { raw in
                withUnsafePointer(to: &storage) { pointer in
                    pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                        sendto(fd, raw.baseAddress, raw.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT), address, length)
                    }
                }
            }
        } while sent < 0 && errno == EINTR
        guard sent >= 0 else { throw .system(call: "sendto", errno: errno) }
        guard sent == bytes.count else { throw .shortWrite(sent: sent) }
    }

    /// Fills `storage` for `address` and returns the address length to pass to `sendto`.
    /// An abstract name has no terminating NUL and its length counts exactly its bytes.
    static func fill(_ storage: inout sockaddr_un, with address: String) throws(UnixDatagramError) -> socklen_t {
        var path = Array(address.utf8)
        let abstract: Bool
        switch path.first {
        case UInt8(ascii: "/"):
            abstract = false
        case UInt8(ascii: "@") where path.count > 1:
            abstract = true
            path[0] = 0
        default:
            throw .unsupportedAddress
        }
        if !abstract && path.contains(0) { throw .unsupportedAddress }
        let capacity = MemoryLayout.size(ofValue: storage.sun_path)
        // A path needs room for its NUL terminator; an abstract name does not.
        guard path.count + (abstract ? 0 : 1) <= capacity else { throw .addressTooLong }

        storage.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &storage.sun_path) { raw in
            raw.initializeMemory(as: UInt8.self, repeating: 0)
            raw.copyBytes(from: path)
        }
        let pathOffset = MemoryLayout<sockaddr_un>.offset(of: \sockaddr_un.sun_path)!  // a stored field: never nil
        return socklen_t(pathOffset + path.count + (abstract ? 0 : 1))
    }
}
