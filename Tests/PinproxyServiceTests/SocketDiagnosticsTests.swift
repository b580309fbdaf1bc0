import Foundation
import Glibc
import PinproxyCore
import XCTest
import CPinproxyShims
import PinproxyInterop

/// `SocketDiagnostics` against this kernel: real loopback connections looked up by their exact
/// 4-tuple, with the uid, inode and state the kernel records and the cgroup id it sends
/// unasked (`INET_DIAG_CGROUP_ID`, compared with the inode of this process's cgroup v2
/// directory).
final class SocketDiagnosticsTests: XCTestCase {
    func testAnEstablishedIPv4ClientIsFoundWithItsOwnerInodeAndCgroup() throws {
        let pair = try ConnectedPair(address: "127.0.0.1")
        defer { pair.close() }
        let diagnostics = try SocketDiagnostics()
        let owner = try XCTUnwrap(try diagnostics.lookUp(local: pair.clientAddress, remote: pair.serverAddress))
        XCTAssertTrue(owner.isEstablished)
        XCTAssertEqual(owner.uid, getuid())
        XCTAssertEqual(UInt64(owner.inode), try inode(of: pair.client))
        let cgroup = try XCTUnwrap(owner.cgroupID, "this kernel sent no INET_DIAG_CGROUP_ID")
        if let directory = ownCgroupDirectory() {
            XCTAssertEqual(cgroup, try inode(ofPath: directory), "the cgroup id is the inode of \(directory)")
        }
        // The accepted end is another socket, owned by the same user: looked up the other way round.
        let server = try XCTUnwrap(try diagnostics.lookUp(local: pair.serverAddress, remote: pair.clientAddress))
        XCTAssertEqual(UInt64(server.inode), try inode(of: pair.accepted))
    }

    func testAnIPv6ClientIsFound() throws {
        guard let pair = try? ConnectedPair(address: "::1") else { throw XCTSkip("no IPv6 loopback here") }
        defer { pair.close() }
        let owner = try XCTUnwrap(try SocketDiagnostics().lookUp(local: pair.clientAddress, remote: pair.serverAddress))
        XCTAssertEqual(UInt64(owner.inode), try inode(of: pair.client))
        XCTAssertEqual(owner.uid, getuid())
    }

    func testAFourTupleWithoutASocketIsNotFound() throws {
        let pair = try ConnectedPair(address: "127.0.0.1")
        defer { pair.close() }
        let diagnostics = try SocketDiagnostics()
        let wrongPort = SocketAddress(address: pair.clientAddress.address, port: pair.clientAddress.port &+ 1)
        XCTAssertNil(try diagnostics.lookUp(local: wrongPort, remote: pair.serverAddress))
        XCTAssertNil(try diagnostics.lookUp(local: pair.clientAddress, remote: SocketAddress(address: IPAddress("127.0.0.2")!, port: pair.serverAddress.port)))
    }

    /// A client that has closed its socket leaves an orphan: not established, no inode.
    func testAClosedClientIsNeitherEstablishedNorOwnedByAFile() throws {
        let pair = try ConnectedPair(address: "127.0.0.1")
        defer { pair.close() }
        Glibc.close(pair.client)
        let owner = try SocketDiagnostics().lookUp(local: pair.clientAddress, remote: pair.serverAddress)
        if let owner {
            XCTAssertFalse(owner.isEstablished)
            XCTAssertEqual(owner.inode, 0)
        }
    }

    /// What one lookup costs (printed; bounded only generously): the daemon runs it on the loop.
    func testALookupIsAFastLocalRoundTrip() throws {
        let pair = try ConnectedPair(address: "127.0.0.1")
        defer { pair.close() }
        let diagnostics = try SocketDiagnostics()
        let rounds = 20_000
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        let cpuBefore = seconds(usage.ru_utime) + seconds(usage.ru_stime)
        let started = ProcessLimits.monotonicSeconds()
        for _ in 0..<rounds { _ = try diagnostics.lookUp(local: pair.clientAddress, remote: pair.serverAddress) }
        let wall = (ProcessLimits.monotonicSeconds() - started) / Double(rounds)
        getrusage(RUSAGE_SELF.rawValue, &usage)
        let cpu = (seconds(usage.ru_utime) + seconds(usage.ru_stime) - cpuBefore) / Double(rounds)
        print("SocketDiagnostics.lookUp: \(String(format: "%.2f", wall * 1e6)) µs wall, \(String(format: "%.2f", cpu * 1e6)) µs CPU per lookup (\(rounds) lookups)")
        XCTAssertLessThan(wall, 0.001)
    }

    /// The request is `nlmsghdr` and `inet_diag_req_v2` as the kernel's headers lay them out.
    func testTheRequestIsLaidOutAsTheKernelHeadersSay() throws {
        for (localText, remoteText) in [("127.0.0.1", "10.1.2.3"), ("::1", "2001:db8::7")] {
            let local = SocketAddress(address: try XCTUnwrap(IPAddress(localText)), port: 40_000)
            let remote = SocketAddress(address: try XCTUnwrap(IPAddress(remoteText)), port: 443)
            var header = nlmsghdr()
            header.nlmsg_len = UInt32(MemoryLayout<nlmsghdr>.size + MemoryLayout<inet_diag_req_v2>.size)
            header.nlmsg_type = UInt16(SOCK_DIAG_BY_FAMILY)
            header.nlmsg_flags = UInt16(NLM_F_REQUEST)
            header.nlmsg_seq = 7
            var body = inet_diag_req_v2()
            body.sdiag_family = UInt8(local.address.isIPv6 ? AF_INET6 : AF_INET)
            body.sdiag_protocol = UInt8(IPPROTO_TCP)
            body.idiag_states = UInt32.max
            body.id.idiag_sport = local.port.bigEndian
            body.id.idiag_dport = remote.port.bigEndian
            withUnsafeMutableBytes(of: &body.id.idiag_src) { $0.copyBytes(from: local.address.bytes) }
            withUnsafeMutableBytes(of: &body.id.idiag_dst) { $0.copyBytes(from: remote.address.bytes) }
            body.id.idiag_cookie = (UInt32(INET_DIAG_NOCOOKIE), UInt32(INET_DIAG_NOCOOKIE))
            let expected = withUnsafeBytes(of: &header) { Array($0) } + withUnsafeBytes(of: &body) { Array($0) }
            XCTAssertEqual(SockDiagMessage.request(local: local, remote: remote, sequence: 7), expected)
        }
    }

    /// Answers laid out as the kernel's headers say are read: the socket with its cgroup id, an
    /// error, another socket, another request's answer.
    func testAnswersAreReadAsTheKernelHeadersLayThemOut() throws {
        let local = SocketAddress(address: try XCTUnwrap(IPAddress("127.0.0.1")), port: 40_000)
        let remote = SocketAddress(address: try XCTUnwrap(IPAddress("127.0.0.1")), port: 443)
        func message(type: Int32, sequence: UInt32, payload: [UInt8]) -> [UInt8] {
            var header = nlmsghdr()
            header.nlmsg_len = UInt32(MemoryLayout<nlmsghdr>.size + payload.count)
            header.nlmsg_type = UInt16(type)
            header.nlmsg_seq = sequence
            return withUnsafeBytes(of: &header) { Array($0) } + payload
        }
        var socket = inet_diag_msg()
        socket.idiag_state = 1
        socket.idiag_uid = 1234
        socket.idiag_inode = 5678
        socket.id.idiag_sport = local.port.bigEndian
        socket.id.idiag_dport = remote.port.bigEndian
        var attribute = nlattr(nla_len: UInt16(MemoryLayout<nlattr>.size + 8), nla_type: UInt16(INET_DIAG_CGROUP_ID))
        var cgroup: UInt64 = 0x1_0000_0042
        let found = withUnsafeBytes(of: &socket) { Array($0) } + withUnsafeBytes(of: &attribute) { Array($0) } + withUnsafeBytes(of: &cgroup) { Array($0) }
        var noSuchFile = -ENOENT
        let stale = message(type: Int32(SOCK_DIAG_BY_FAMILY), sequence: 8, payload: found)
        XCTAssertEqual(SockDiagMessage.answer(in: stale + message(type: Int32(SOCK_DIAG_BY_FAMILY), sequence: 9, payload: found),
                                              sequence: 9, local: local, remote: remote),
                       .owner(SocketOwner(state: 1, uid: 1234, inode: 5678, cgroupID: 0x1_0000_0042)))
        XCTAssertEqual(SockDiagMessage.answer(in: message(type: NLMSG_ERROR, sequence: 9, payload: withUnsafeBytes(of: &noSuchFile) { Array($0) }),
                                              sequence: 9, local: local, remote: remote), .error(ENOENT))
        XCTAssertEqual(SockDiagMessage.answer(in: message(type: Int32(SOCK_DIAG_BY_FAMILY), sequence: 9, payload: found),
                                              sequence: 9, local: remote, remote: local), .owner(nil), "another socket")
        XCTAssertNil(SockDiagMessage.answer(in: stale, sequence: 9, local: local, remote: remote))
        XCTAssertEqual(SockDiagMessage.answer(in: Array(stale.dropLast()), sequence: 9, local: local, remote: remote),
                       .truncated("a truncated NETLINK_SOCK_DIAG answer"))
    }

    private func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
}

/// A client socket connected to a listener on `address`, and the accepted end.
private struct ConnectedPair {
    let listener: Int32
    let client: Int32
    let accepted: Int32
    let clientAddress: SocketAddress
    let serverAddress: SocketAddress

    init(address text: String) throws {
        let address = try XCTUnwrap(IPAddress(text))
        let family = address.isIPv6 ? AF_INET6 : AF_INET
        listener = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        client = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let bytes = address.bytes
        withUnsafeMutablePointer(to: &storage) { pointer in
            if address.isIPv6 {
                pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                    $0.pointee.sin6_family = sa_family_t(AF_INET6)
                    withUnsafeMutableBytes(of: &$0.pointee.sin6_addr) { $0.copyBytes(from: bytes) }
                }
            } else {
                pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                    $0.pointee.sin_family = sa_family_t(AF_INET)
                    withUnsafeMutableBytes(of: &$0.pointee.sin_addr) { $0.copyBytes(from: bytes) }
                }
            }
        }
        let size = socklen_t(address.isIPv6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
        let (listener, client) = (listener, client)
        let ok = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(listener, pointer, size) == 0 && listen(listener, 4) == 0 && getsockname(listener, pointer, &length) == 0
                    && connect(client, pointer, length) == 0
            }
        }
        guard ok else {
            Glibc.close(listener)
            Glibc.close(client)
            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
        }
        accepted = accept(listener, nil, nil)
        serverAddress = try XCTUnwrap(Self.address(of: client, peer: true))
        clientAddress = try XCTUnwrap(Self.address(of: client, peer: false))
    }

    static func address(of fd: Int32, peer: Bool) -> SocketAddress? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        return withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer -> SocketAddress? in
                guard (peer ? getpeername(fd, pointer, &length) : getsockname(fd, pointer, &length)) == 0 else { return nil }
                let port = UInt16(bigEndian: UnsafeRawPointer(pointer).load(fromByteOffset: 2, as: UInt16.self))
                let family = Int32(pointer.pointee.sa_family)
                let bytes = family == AF_INET6
                    ? Array(UnsafeRawBufferPointer(start: UnsafeRawPointer(pointer) + 8, count: 16))
                    : Array(UnsafeRawBufferPointer(start: UnsafeRawPointer(pointer) + 4, count: 4))
                return IPAddress(bytes: bytes).map { SocketAddress(address: $0, port: port) }
            }
        }
    }

    func close() {
        for fd in [listener, client, accepted] { Glibc.close(fd) }
    }
}

private func inode(of fd: Int32) throws -> UInt64 {
    var info = stat()
    guard fstat(fd, &info) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    return UInt64(info.st_ino)
}

private func inode(ofPath path: String) throws -> UInt64 {
    var info = stat()
    guard stat(path, &info) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    return UInt64(info.st_ino)
}

/// This process's cgroup v2 directory: the `0::PATH` line of /proc/self/cgroup under the
/// cgroup2 mount of /proc/self/mountinfo.
private func ownCgroupDirectory() -> String? {
    guard let cgroups = try? String(contentsOfFile: "/proc/self/cgroup", encoding: .utf8),
          let line = cgroups.split(separator: "\n").first(where: { $0.hasPrefix("0::") }),
          let mounts = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8),
          let mount = mounts.split(separator: "\n").first(where: { $0.contains(" - cgroup2 ") }) else { return nil }
    let fields = mount.split(separator: " ")
    guard fields.count > 4 else { return nil }
    return String(fields[4]) + String(line.dropFirst(3))
}
