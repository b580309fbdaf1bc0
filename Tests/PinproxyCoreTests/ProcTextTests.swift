@testable import PinproxyCore
import XCTest

/// The /proc texts pinproxy reads, parsed: /proc/net/tcp's listeners and mountinfo's cgroup2 mount.
final class ProcTextTests: XCTestCase {
    func testListenersOnAnAddressOrAWildcardAreFound() throws {
        let table = """
              sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
               0: 0100007F:0C38 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1
               1: 00000000:0C38 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 222 1
               2: 0100007F:0C39 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 333 1
               3: 0100007F:0C38 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 444 1
            """
        let loopback = SocketAddress(address: try XCTUnwrap(IPAddress("127.0.0.1")), port: 3128)
        XCTAssertEqual(ProcNetTCP.listeningInodes(in: table, overlapping: loopback), [111, 222])
        let other = SocketAddress(address: try XCTUnwrap(IPAddress("127.0.0.2")), port: 3128)
        XCTAssertEqual(ProcNetTCP.listeningInodes(in: table, overlapping: other), [222])
        XCTAssertEqual(ProcNetTCP.parse("00000000000000000000000001000000:0050"),
                       SocketAddress(address: try XCTUnwrap(IPAddress("::1")), port: 80))
    }

    func testTheCgroup2MountIsFoundAndUnescaped() {
        let mountinfo = """
            22 1 0:21 / /proc rw,nosuid - proc proc rw
            35 24 0:30 / /sys/fs/cgroup/with\\040space rw,nosuid - cgroup2 cgroup2 rw
            """
        XCTAssertEqual(Mountinfo.cgroup2MountPoint(in: mountinfo), "/sys/fs/cgroup/with space")
        XCTAssertNil(Mountinfo.cgroup2MountPoint(in: "22 1 0:21 / /proc rw,nosuid - proc proc rw"))
    }

    /// An intercepted client may send no SNI, or the expected one in any ASCII case with one
    /// trailing dot.
    func testTheExpectedServerNameIsComparedAsSNIIs() {
        let expected = ExpectedServerName("Example.COM")
        XCTAssertTrue(expected.accepts(nil))
        XCTAssertTrue(expected.accepts("example.com."))
        XCTAssertTrue(expected.accepts("EXAMPLE.com"))
        XCTAssertFalse(expected.accepts("example.com.."))
        XCTAssertFalse(expected.accepts("www.example.com"))
        XCTAssertTrue(ExpectedServerName(nil).accepts("anything"))
        XCTAssertEqual(ClientHello.serverName(inList: [0, 0, 3] + Array("a.b".utf8)), "a.b")
        XCTAssertNil(ClientHello.serverName(inList: [0, 0, 4] + Array("a.b".utf8)))
    }
}
