import Foundation
import Glibc
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import PinproxyService
import XCTest
@testable import PinproxyProxy

/// `ClientIdentifier` on a real loop with real sockets, and how a pending identity settles.
final class ClientIdentifierTests: XCTestCase {
    static let owner = SocketOwner(state: SocketOwner.established, uid: 1000, inode: 42, cgroupID: 7)

    func testTheHolderOfASocketIsFoundWithItsProgram() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        defer { close(fd) }
        var info = stat()
        XCTAssertEqual(fstat(fd, &info), 0)
        let holder = try XCTUnwrap(ProcessExecutables.holder(ofSocket: UInt32(info.st_ino), uid: geteuid(), hints: [],
                                                             deadline: ProcessLimits.monotonicSeconds() + 20))
        XCTAssertEqual(holder.pid, getpid())
        XCTAssertEqual(holder.executable, ProcessExecutables.realPath("/proc/self/exe"))
        XCTAssertNil(ProcessExecutables.holder(ofSocket: UInt32(info.st_ino), uid: geteuid(), hints: [],
                                               deadline: ProcessLimits.monotonicSeconds() - 1), "the deadline had passed")
    }

    func testAPendingIdentityCompletesOrFailsClosedOnItsUnit() {
        let cached = PendingIdentity(owner: Self.owner, user: .some("alice"), unit: .some("backup.service"))
        XCTAssertEqual(cached.identity(with: .init(user: nil, unit: nil, exe: "/usr/bin/git")),
                       .local(LocalClient(uid: 1000, user: "alice", unit: "backup.service", exe: "/usr/bin/git")))
        XCTAssertEqual(cached.identityWithoutLookups, .local(LocalClient(uid: 1000, user: "alice", unit: "backup.service")))
        let looking = PendingIdentity(owner: Self.owner, user: nil, unit: nil)
        XCTAssertEqual(looking.identity(with: .init(user: "alice", unit: .noUnit, exe: nil)), .local(LocalClient(uid: 1000, user: "alice")))
        // A unit that was not found (in time) makes the client partly known, which fails closed
        // (ClientPolicy.decide): a unit: section is never skipped, and its uid's sections still apply.
        guard case .partlyKnown(let known, let why) = looking.identity(with: .init(user: "alice", unit: nil, exe: nil)) else { return XCTFail() }
        XCTAssertEqual(known, LocalClient(uid: 1000, user: "alice"))
        XCTAssertTrue(why.contains("cgroup 7"), why)
        guard case .partlyKnown(LocalClient(uid: 1000), _) = looking.identityWithoutLookups else { return XCTFail() }
        // The name is best effort.
        let nameless = PendingIdentity(owner: Self.owner, user: nil, unit: .some(nil))
        XCTAssertEqual(nameless.identityWithoutLookups, .local(LocalClient(uid: 1000)))
    }

    func testALocalClientIsFoundAndARemoteOneIsNotLookedUp() throws {
        let loop = try EventLoop()
        let metrics = ProxyMetrics(version: "0.0.0-test", commit: "test")
        let identifier = ClientIdentifier(lookups: IdentityLookups(cgroupRoot: CgroupTree.root()))
        let (listener, client, server, clientEnd) = try loopbackConnection()
        defer { close(listener); close(client) }

        var parts: IdentityLookups.Parts?
        let start = identifier.start(peer: clientEnd, ourEnd: server, needsExecutable: true, deadline: ProcessLimits.monotonicSeconds() + 20,
                                     on: loop, metrics: metrics) { found in
            parts = found
            loop.stop()
        }
        guard case .pending(let pending) = start else { return XCTFail("\(start)") }
        XCTAssertEqual(pending.owner.uid, geteuid())
        loop.run()
        let identity = pending.identity(with: try XCTUnwrap(parts))
        guard case .local(let local) = identity else { return XCTFail("\(identity)") }
        XCTAssertEqual(local.uid, geteuid())
        XCTAssertEqual(local.exe, ProcessExecutables.realPath("/proc/self/exe"))
        if case .found(let name) = UserDatabase.name(ofUID: geteuid()) { XCTAssertEqual(local.user, name) }

        // The name and the unit are cached now: a second client of the same user is known at once.
        let again = identifier.start(peer: clientEnd, ourEnd: server, needsExecutable: false, deadline: ProcessLimits.monotonicSeconds() + 20,
                                     on: loop, metrics: metrics) { _ in XCTFail("nothing to look up") }
        guard case .known(.local(let cachedClient)) = again else { return XCTFail("\(again)") }
        XCTAssertEqual(cachedClient.user, local.user)
        XCTAssertEqual(cachedClient.unit, local.unit)

        let remote = identifier.start(peer: SocketAddress(address: IPAddress("192.0.2.7")!, port: 4000), ourEnd: server, needsExecutable: true,
                                      deadline: ProcessLimits.monotonicSeconds() + 20, on: loop, metrics: metrics) { _ in XCTFail("remote") }
        guard case .known(.remote) = remote else { return XCTFail("\(remote)") }
        let gone = identifier.start(peer: SocketAddress(address: clientEnd.address, port: clientEnd.port &+ 1), ourEnd: server,
                                    needsExecutable: true, deadline: ProcessLimits.monotonicSeconds() + 20, on: loop, metrics: metrics) { _ in XCTFail("gone") }
        guard case .known(.unknown) = gone else { return XCTFail("\(gone)") }
        let samples = metrics.render()
        XCTAssertTrue(samples.contains(#"pinproxy_client_lookups_total{result="found"} 2"#), samples)
        XCTAssertTrue(samples.contains(#"pinproxy_client_lookups_total{result="unknown"} 1"#), samples)
    }

    /// A listener on 127.0.0.1 and a client connected to it (left in the accept queue).
    private func loopbackConnection() throws -> (listener: Int32, client: Int32, server: SocketAddress, clientEnd: SocketAddress) {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let connected = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, length) == 0 && listen(listener, 4) == 0 && getsockname(listener, $0, &length) == 0 && connect(client, $0, length) == 0
            }
        }
        XCTAssertTrue(connected)
        return (listener, client, try XCTUnwrap(SocketAddress.local(of: listener)), try XCTUnwrap(SocketAddress.local(of: client)))
    }
}
