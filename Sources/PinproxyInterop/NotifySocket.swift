import Glibc
import Foundation
// For the socket constants; see the note in InheritedSockets.swift.
import CPinproxyShims

/// Why a datagram could not be sent to the service manager's notification socket.
public enum NotifySocketError: Error, Equatable, Sendable, CustomStringConvertible {
    /// `NOTIFY_SOCKET` is neither an absolute path nor an abstract name (`@…`), or is empty.
    case unsupportedAddress(String)
    /// The address does not fit in `sockaddr_un.sun_path` (108 bytes).
    case addressTooLong(String)
    /// A system call failed: its name and `errno`.
    case system(call: String, errno: Int32)
    /// The kernel accepted fewer bytes than the datagram holds.
    case shortWrite(sent: Int, expected: Int)

    public var description: String {
        switch self {
        case .unsupportedAddress(let address):
            return "unsupported NOTIFY_SOCKET address '\(address)'"
        case .addressTooLong(let address):
            return "NOTIFY_SOCKET address too long: '\(address)'"
        case .system(let call, let code):
            return "\(call): \(String(cString: strerror(code)))"
        case .shortWrite(let sent, let expected):
            return "short write to NOTIFY_SOCKET: \(sent) of \(expected) bytes"
        }
    }
}

/// The sending half of systemd's notification protocol (`sd_notify(3)`), without libsystemd:
/// one `AF_UNIX` datagram of newline-separated `KEY=VALUE` assignments, sent to the socket named
/// by `NOTIFY_SOCKET`. That is either a filesystem path (`/run/systemd/notify`) or, with a
/// leading `@`, a name in the Linux abstract namespace.
///
/// Each send opens a fresh `SOCK_DGRAM | SOCK_CLOEXEC` socket, sends once and closes it, so it
/// holds no state and may be called from any thread. It never blocks (MSG_DONTWAIT): a reader
/// whose queue is full loses that datagram rather than stall an event loop. Failures are
/// returned, never fatal.
public enum NotifySocket {
    /// Sends `message` as one datagram to `address` (a `NOTIFY_SOCKET` value).
    public static func send(_ message: String, to address: String) throws(NotifySocketError) {
        var storage = sockaddr_un()
        let length = try fill(&storage, with: address)

        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .system(call: "socket", errno: errno) }
        defer { close(fd) }

        let bytes = Array(message.utf8)
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
        guard sent == bytes.count else { throw .shortWrite(sent: sent, expected: bytes.count) }
    }

    /// Fills `storage` for `address` and returns the address length to pass to `sendto`.
    /// An abstract name has no terminating NUL and its length counts exactly its bytes.
    static func fill(_ storage: inout sockaddr_un, with address: String) throws(NotifySocketError) -> socklen_t {
        var path = Array(address.utf8)
        let abstract: Bool
        switch path.first {
        case UInt8(ascii: "/"):
            abstract = false
        case UInt8(ascii: "@") where path.count > 1:
            abstract = true
            path[0] = 0
        default:
            throw .unsupportedAddress(address)
        }
        if !abstract && path.contains(0) { throw .unsupportedAddress(address) }
        let capacity = MemoryLayout.size(ofValue: storage.sun_path)
        // A path needs room for its NUL terminator; an abstract name does not.
        guard path.count + (abstract ? 0 : 1) <= capacity else { throw .addressTooLong(address) }

        storage.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &storage.sun_path) { raw in
            raw.initializeMemory(as: UInt8.self, repeating: 0)
            raw.copyBytes(from: path)
        }
        let pathOffset = MemoryLayout<sockaddr_un>.offset(of: \sockaddr_un.sun_path)!  // a stored field: never nil
        return socklen_t(pathOffset + path.count + (abstract ? 0 : 1))
    }

    /// `CLOCK_MONOTONIC` in microseconds: the clock of `MONOTONIC_USEC=` in a reload notification.
    public static func monotonicMicroseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1_000
    }
}
