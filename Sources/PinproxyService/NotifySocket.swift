import PinproxyCore
import PinproxyInterop

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
            return "\(call): \(ProcessEnvironment.errorText(code))"
        case .shortWrite(let sent, let expected):
            return "short write to NOTIFY_SOCKET: \(sent) of \(expected) bytes"
        }
    }
}

/// The sending half of systemd's notification protocol (`sd_notify(3)`), without libsystemd:
/// one `AF_UNIX` datagram of newline-separated `KEY=VALUE` assignments, sent to the socket named
/// by `NOTIFY_SOCKET`. That is either a filesystem path (`/run/systemd/notify`) or, with a
/// leading `@`, a name in the Linux abstract namespace (`UnixDatagram`: a fresh socket per
/// send, never blocking, callable from any thread). Failures are returned, never fatal.
public enum NotifySocket {
    /// Sends `message` as one datagram to `address` (a `NOTIFY_SOCKET` value).
    public static func send(_ message: String, to address: String) throws(NotifySocketError) {
        let bytes = Array(message.utf8)
        do throws(UnixDatagramError) {
            try UnixDatagram.send(bytes, to: address)
        } catch {
            switch error {
            case .unsupportedAddress: throw .unsupportedAddress(address)
            case .addressTooLong: throw .addressTooLong(address)
            case .system(let call, let code): throw .system(call: call, errno: code)
            case .shortWrite(let sent): throw .shortWrite(sent: sent, expected: bytes.count)
            }
        }
    }
}
