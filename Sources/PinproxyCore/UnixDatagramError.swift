/// Why a datagram could not be sent to a Unix socket address (Interop's `UnixDatagram`).
public enum UnixDatagramError: Error, Equatable, Sendable {
    /// The address is neither an absolute path nor an abstract name (`@…`), or is empty.
    case unsupportedAddress
    /// The address does not fit in `sockaddr_un.sun_path` (108 bytes).
    case addressTooLong
    /// A system call failed: its name and `errno`.
    case system(call: String, errno: Int32)
    /// The kernel accepted fewer bytes than the datagram holds.
    case shortWrite(sent: Int)
}
