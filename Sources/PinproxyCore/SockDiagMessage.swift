/// The netlink messages of a `SOCK_DIAG_BY_FAMILY` lookup of one TCP socket, as bytes
/// (`SocketDiagnostics` sends and receives them): the layouts of <linux/netlink.h> and
/// <linux/inet_diag.h>, in host byte order but for the ports (network order).
public enum SockDiagMessage {
    /// `SOCK_DIAG_BY_FAMILY`: the type of the request and of its answer.
    static let requestType: UInt16 = 20
    /// `NLMSG_ERROR`.
    static let errorType: UInt16 = 2
    /// `NLM_F_REQUEST`.
    static let requestFlag: UInt16 = 1
    /// `INET_DIAG_CGROUP_ID`.
    static let cgroupIDAttribute: UInt16 = 21
    /// The sizes of `struct nlmsghdr`, `struct inet_diag_msg` and `struct nlattr`.
    static let headerSize = 16
    static let messageSize = 72
    static let attributeHeaderSize = 4
    /// `nlmsghdr` then `inet_diag_req_v2`.
    static let requestSize = 16 + 56

    /// What the kernel answered to one request.
    public enum Answer: Equatable {
        /// The socket asked for, or nil when the answer describes another one.
        case owner(SocketOwner?)
        /// `NLMSG_ERROR` with this errno (ENOENT: there is no such socket).
        case error(Int32)
        /// A message shorter than it says (this names it).
        case truncated(String)
    }

    /// The request for the TCP socket whose own end is `local` and whose peer is `remote` (both
    /// of one family), as message `sequence`: every state, no cookie.
    public static func request(local: SocketAddress, remote: SocketAddress, sequence: UInt32) -> [UInt8] {
        var bytes = hostOrder(UInt32(requestSize)) + hostOrder(requestType) + hostOrder(requestFlag)
        bytes += hostOrder(sequence) + hostOrder(UInt32(0))
        bytes += [local.address.isIPv6 ? 10 : 2, 6, 0, 0]  // AF_INET6 or AF_INET, IPPROTO_TCP, no extensions
        bytes += hostOrder(UInt32.max)  // idiag_states: all
        bytes += [UInt8(local.port >> 8), UInt8(local.port & 0xff), UInt8(remote.port >> 8), UInt8(remote.port & 0xff)]
        for address in [local.address, remote.address] {
            bytes += address.bytes + [UInt8](repeating: 0, count: 16 - address.bytes.count)
        }
        bytes += hostOrder(UInt32(0)) + hostOrder(UInt32.max) + hostOrder(UInt32.max)  // any interface, INET_DIAG_NOCOOKIE
        return bytes
    }

    /// The answer to request `sequence` among the messages in `bytes`; nil when none is.
    public static func answer(in bytes: [UInt8], sequence: UInt32, local: SocketAddress, remote: SocketAddress) -> Answer? {
        var offset = 0
        while offset + headerSize <= bytes.count {
            let length = Int(loadUInt32(bytes, offset))
            guard length >= headerSize, offset + length <= bytes.count else { return .truncated("a truncated NETLINK_SOCK_DIAG answer") }
            defer { offset += align(length) }
            guard loadUInt32(bytes, offset + 8) == sequence else { continue }
            let payload = Array(bytes[(offset + headerSize)..<(offset + length)])
            switch loadUInt16(bytes, offset + 4) {
            case errorType:
                guard payload.count >= 4 else { return .truncated("a truncated NETLINK_SOCK_DIAG error") }
                return .error(-Int32(bitPattern: loadUInt32(payload, 0)))
            case requestType:
                return .owner(owner(payload, local: local, remote: remote))
            default:
                continue
            }
        }
        return nil
    }

    /// The owner an `inet_diag_msg` and its attributes describe, when it is the socket asked for.
    private static func owner(_ payload: [UInt8], local: SocketAddress, remote: SocketAddress) -> SocketOwner? {
        guard payload.count >= messageSize else { return nil }
        let sourcePort = UInt16(payload[4]) << 8 | UInt16(payload[5]), destinationPort = UInt16(payload[6]) << 8 | UInt16(payload[7])
        guard sourcePort == local.port, destinationPort == remote.port else { return nil }
        var cgroupID: UInt64?
        var offset = align(messageSize)
        while offset + attributeHeaderSize <= payload.count {
            let length = Int(loadUInt16(payload, offset))
            guard length >= attributeHeaderSize, offset + length <= payload.count else { break }
            if loadUInt16(payload, offset + 2) == cgroupIDAttribute, length - attributeHeaderSize >= 8 {
                cgroupID = load(UInt64.self, payload, offset + attributeHeaderSize)
            }
            offset += align(length)
        }
        return SocketOwner(state: payload[1], uid: loadUInt32(payload, 64), inode: loadUInt32(payload, 68), cgroupID: cgroupID)
    }

    /// Netlink messages and attributes start on 4-byte boundaries.
    private static func align(_ length: Int) -> Int { (length + 3) & ~3 }

    /// The bytes of `value` as they lie in memory.
    private static func hostOrder<T: FixedWidthInteger>(_ value: T) -> [UInt8] {
        let stored = value.littleEndian
        return (0..<(T.bitWidth / 8)).map { UInt8(truncatingIfNeeded: stored >> ($0 * 8)) }
    }

    /// The `T` whose bytes lie at `offset` of `bytes`, in host order.
    private static func load<T: FixedWidthInteger>(_ type: T.Type, _ bytes: [UInt8], _ offset: Int) -> T {
        T(littleEndian: (0..<(T.bitWidth / 8)).reduce(T.zero) { $0 | T(bytes[offset + $1]) << ($1 * 8) })
    }

    private static func loadUInt16(_ bytes: [UInt8], _ offset: Int) -> UInt16 { load(UInt16.self, bytes, offset) }

    private static func loadUInt32(_ bytes: [UInt8], _ offset: Int) -> UInt32 { load(UInt32.self, bytes, offset) }
}
