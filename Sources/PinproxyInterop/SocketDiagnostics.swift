import Glibc
import CPinproxyShims

/// One `NETLINK_SOCK_DIAG` socket that looks up TCP sockets by their exact 4-tuple
/// (`SOCK_DIAG_BY_FAMILY` without `NLM_F_DUMP`: the kernel's hash lookup, not a table walk).
/// The kernel answers a request while it is sent, so the answer is read without waiting and a
/// lookup never blocks. `INET_DIAG_CGROUP_ID` comes with every answer (Linux 5.7 and later)
/// without being asked for in `idiag_ext`. Not thread-safe: one per event loop.
public final class SocketDiagnostics {
    private let fd: Int32
    private var sequence: UInt32 = 0

    /// Opens the netlink socket; fails where `AF_NETLINK` is not allowed (a sandbox's
    /// `RestrictAddressFamilies=`).
    public init() throws(SystemError) {
        fd = socket(AF_NETLINK, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), NETLINK_SOCK_DIAG)
        guard fd >= 0 else { throw SystemError("socket(AF_NETLINK, NETLINK_SOCK_DIAG)", errno) }
        var kernel = sockaddr_nl()
        kernel.nl_family = sa_family_t(AF_NETLINK)
        let connected = withUnsafePointer(to: &kernel) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_nl>.size)) }
        }
        guard connected == 0 else {
            let code = errno
            close(fd)
            throw SystemError("connect(NETLINK_SOCK_DIAG)", code)
        }
    }

    deinit {
        close(fd)
    }

    /// The TCP socket whose own end is `local` and whose peer is `remote` (both of one family;
    /// IPv4-mapped addresses are looked up as IPv4); nil when there is none.
    public func lookUp(local: SocketAddress, remote: SocketAddress) throws(SystemError) -> SocketOwner? {
        let local = SocketAddress(address: local.address.unmapped, port: local.port)
        let remote = SocketAddress(address: remote.address.unmapped, port: remote.port)
        guard local.address.isIPv6 == remote.address.isIPv6 else { return nil }
        sequence &+= 1
        try send(request(local: local, remote: remote))
        return try receive(local: local, remote: remote)
    }

    /// Why client sockets cannot be looked up in this process (a sandbox without AF_NETLINK,
    /// a kernel without inet_diag), or nil when a loopback connection of its own is found, owned
    /// by its own user. Without a loopback connection to try, opening the socket is the test.
    public static func selfTestProblem() -> String? {
        let diagnostics: SocketDiagnostics
        do {
            diagnostics = try SocketDiagnostics()
        } catch {
            return error.description
        }
        guard let pair = LoopbackConnection() else { return nil }
        defer { pair.close() }
        do throws(SystemError) {
            guard let owner = try diagnostics.lookUp(local: pair.client, remote: pair.server) else {
                return "a loopback connection of pinproxy's own was not found"
            }
            guard owner.uid == geteuid() else { return "a loopback connection of pinproxy's own was reported as uid \(owner.uid), not \(geteuid())" }
            return nil
        } catch {
            return error.description
        }
    }

    private struct Request {
        var header = nlmsghdr()
        var body = inet_diag_req_v2()
    }

    private func request(local: SocketAddress, remote: SocketAddress) -> Request {
        var request = Request()
        request.header.nlmsg_len = UInt32(MemoryLayout<Request>.size)
        request.header.nlmsg_type = UInt16(SOCK_DIAG_BY_FAMILY)
        request.header.nlmsg_flags = UInt16(NLM_F_REQUEST)
        request.header.nlmsg_seq = sequence
        request.body.sdiag_family = UInt8(local.address.isIPv6 ? AF_INET6 : AF_INET)
        request.body.sdiag_protocol = UInt8(IPPROTO_TCP)
        request.body.idiag_states = UInt32.max
        request.body.id.idiag_sport = local.port.bigEndian
        request.body.id.idiag_dport = remote.port.bigEndian
        withUnsafeMutableBytes(of: &request.body.id.idiag_src) { $0.copyBytes(from: local.address.bytes) }
        withUnsafeMutableBytes(of: &request.body.id.idiag_dst) { $0.copyBytes(from: remote.address.bytes) }
        request.body.id.idiag_cookie = (UInt32(INET_DIAG_NOCOOKIE), UInt32(INET_DIAG_NOCOOKIE))
        return request
    }

    private func send(_ request: Request) throws(SystemError) {
        var request = request
        while true {
            let sent = withUnsafeBytes(of: &request) { Glibc.send(fd, $0.baseAddress, $0.count, 0) }
            if sent == MemoryLayout<Request>.size { return }
            if sent < 0 && errno == EINTR { continue }
            throw SystemError("send(NETLINK_SOCK_DIAG)", sent < 0 ? errno : EMSGSIZE)
        }
    }

    /// Reads answers until the one to the current request; earlier ones (there should be none)
    /// are skipped.
    private func receive(local: SocketAddress, remote: SocketAddress) throws(SystemError) -> SocketOwner? {
        var buffer = [UInt8](repeating: 0, count: 8192)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if count < 0 && errno == EINTR { continue }
            // EAGAIN: the kernel sent nothing within the send, which it always does.
            guard count > 0 else { throw SystemError("recv(NETLINK_SOCK_DIAG)", count < 0 ? errno : EPROTO) }
            let answer: Result<SocketOwner?, SystemError>? = buffer.withUnsafeBytes { raw in
                Self.parse(UnsafeRawBufferPointer(rebasing: raw[..<count]), sequence: sequence, local: local, remote: remote)
            }
            if let answer { return try answer.get() }
        }
    }

    /// The answer to request `sequence` among the messages in `bytes`; nil when none is.
    static func parse(_ bytes: UnsafeRawBufferPointer, sequence: UInt32, local: SocketAddress,
                      remote: SocketAddress) -> Result<SocketOwner?, SystemError>? {
        let headerSize = MemoryLayout<nlmsghdr>.size
        var offset = 0
        while offset + headerSize <= bytes.count {
            let header = bytes.loadUnaligned(fromByteOffset: offset, as: nlmsghdr.self)
            let length = Int(header.nlmsg_len)
            guard length >= headerSize, offset + length <= bytes.count else { return .failure(SystemError("a truncated NETLINK_SOCK_DIAG answer", EPROTO)) }
            defer { offset += align(length) }
            guard header.nlmsg_seq == sequence else { continue }
            let payload = UnsafeRawBufferPointer(rebasing: bytes[(offset + headerSize)..<(offset + length)])
            switch Int32(header.nlmsg_type) {
            case NLMSG_ERROR:
                guard payload.count >= MemoryLayout<Int32>.size else { return .failure(SystemError("a truncated NETLINK_SOCK_DIAG error", EPROTO)) }
                let code = -payload.loadUnaligned(as: Int32.self)
                return code == ENOENT ? .success(nil) : .failure(SystemError("SOCK_DIAG_BY_FAMILY", code))
            case Int32(SOCK_DIAG_BY_FAMILY):
                return .success(owner(payload, local: local, remote: remote))
            default:
                continue
            }
        }
        return nil
    }

    /// The owner an `inet_diag_msg` and its attributes describe, when it is the socket asked for.
    private static func owner(_ payload: UnsafeRawBufferPointer, local: SocketAddress, remote: SocketAddress) -> SocketOwner? {
        let messageSize = MemoryLayout<inet_diag_msg>.size
        guard payload.count >= messageSize else { return nil }
        let message = payload.loadUnaligned(as: inet_diag_msg.self)
        guard UInt16(bigEndian: message.id.idiag_sport) == local.port, UInt16(bigEndian: message.id.idiag_dport) == remote.port else { return nil }
        var cgroupID: UInt64?
        var offset = align(messageSize)
        let attributeHeader = MemoryLayout<nlattr>.size
        while offset + attributeHeader <= payload.count {
            let attribute = payload.loadUnaligned(fromByteOffset: offset, as: nlattr.self)
            let length = Int(attribute.nla_len)
            guard length >= attributeHeader, offset + length <= payload.count else { break }
            if Int(attribute.nla_type) == Int(INET_DIAG_CGROUP_ID), length - attributeHeader >= 8 {
                cgroupID = payload.loadUnaligned(fromByteOffset: offset + attributeHeader, as: UInt64.self)
            }
            offset += align(length)
        }
        return SocketOwner(state: message.idiag_state, uid: message.idiag_uid, inode: message.idiag_inode, cgroupID: cgroupID)
    }

    /// Netlink messages and attributes start on 4-byte boundaries.
    private static func align(_ length: Int) -> Int { (length + 3) & ~3 }
}

/// A connection from 127.0.0.1 to a listener on 127.0.0.1, left in the listener's queue.
private struct LoopbackConnection {
    let listener: Int32
    let socket: Int32
    let client: SocketAddress
    let server: SocketAddress

    init?() {
        guard let loopback = IPAddress(bytes: [127, 0, 0, 1]) else { return nil }
        let listener = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        let bound = SocketAddress(address: loopback, port: 0).withSockaddr { bind(listener, $0, $1) == 0 } && Glibc.listen(listener, 1) == 0
        guard listener >= 0, socket >= 0, bound, let server = SocketAddress.local(of: listener),
              server.withSockaddr({ connect(socket, $0, $1) }) == 0, let client = SocketAddress.local(of: socket) else {
            if listener >= 0 { Glibc.close(listener) }
            if socket >= 0 { Glibc.close(socket) }
            return nil
        }
        (self.listener, self.socket, self.client, self.server) = (listener, socket, client, server)
    }

    func close() {
        Glibc.close(socket)
        Glibc.close(listener)
    }
}
