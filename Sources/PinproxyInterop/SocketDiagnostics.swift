import Glibc
import CPinproxyShims
import PinproxyCore

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
        try send(SockDiagMessage.request(local: local, remote: remote, sequence: sequence))
        return try receive(local: local, remote: remote)
    }

    private func send(_ request: [UInt8]) throws(SystemError) {
        while true {
            let sent = request.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, 0) }
            if sent == request.count { return }
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
            switch SockDiagMessage.answer(in: Array(buffer[..<count]), sequence: sequence, local: local, remote: remote) {
            case nil: continue
            case .owner(let owner): return owner
            case .error(let code):
                guard code != ENOENT else { return nil }
                throw SystemError("SOCK_DIAG_BY_FAMILY", code)
            case .truncated(let what): throw SystemError(what, EPROTO)
            }
        }
    }
}

/// A connection from 127.0.0.1 to a listener on 127.0.0.1, left in the listener's queue.
public struct LoopbackConnection {
    let listener: Int32
    let socket: Int32
    public let client: SocketAddress
    public let server: SocketAddress

    public init?() {
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

    public func close() {
        Glibc.close(socket)
        Glibc.close(listener)
    }
}
