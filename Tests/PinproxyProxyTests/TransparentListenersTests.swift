import PinproxyCore
import Glibc
import CPinproxyShims
import PinproxyInterop
@testable import PinproxyProxy
import XCTest

/// Which transparent listeners the daemon opens: passed ones first, the rest bound; IPv6 left out
/// only where the family is unavailable (`ipv6.disable=1` answers EAFNOSUPPORT, a disabled `lo`
/// EADDRNOTAVAIL), and only when an IPv4 listener remains.
final class TransparentListenersTests: XCTestCase {
    let v4 = SocketAddress(address: IPAddress("127.0.0.1")!, port: 8)
    let v6 = SocketAddress(address: IPAddress("::1")!, port: 8)

    func testIPv6UnavailableLeavesTheIPv4ListenerAlone() throws {
        for code in [EAFNOSUPPORT, EADDRNOTAVAIL] {
            var asked: [SocketAddress] = []
            let opened = try TransparentListeners.open([v4, v6], inherited: []) { address throws(SystemError) in
                asked.append(address)
                if address.address.isIPv6 { throw SystemError("socket", code) }
                return 41
            }
            XCTAssertEqual(asked, [v4, v6])
            XCTAssertEqual(opened.sockets.map(\.address), [v4])
            XCTAssertEqual(opened.sockets.map(\.fd), [41])
            XCTAssertEqual(opened.unavailable.map(\.address), [v6])
            XCTAssertEqual(opened.unavailable.map(\.error.code), [code])
        }
    }

    /// Where /proc says IPv6 is off, [::1] is not tried: the privileged port would answer EACCES.
    func testIPv6KnownOffIsNotTried() throws {
        var asked: [SocketAddress] = []
        let opened = try TransparentListeners.open([v4, v6], inherited: [], ipv6Available: false) { address throws(SystemError) in
            asked.append(address)
            if address.address.isIPv6 { throw SystemError("bind", EACCES) }
            return 41
        }
        XCTAssertEqual(asked, [v4])
        XCTAssertEqual(opened.unavailable.map(\.address), [v6])
    }

    func testOtherFailuresStopTheStart() {
        for code in [EACCES, EADDRINUSE] {
            XCTAssertThrowsError(try TransparentListeners.open([v4, v6], inherited: []) { address throws(SystemError) in
                if address.address.isIPv6 { throw SystemError("bind", code) }
                return -1
            }) { error in
                XCTAssertTrue("\(error)".hasPrefix("cannot listen on [::1]:8 (proxy.transparent_listen): bind: "), "\(error)")
                if code == EACCES { XCTAssertTrue("\(error)".contains("CAP_NET_BIND_SERVICE"), "\(error)") }
            }
        }
        // IPv6 alone: nothing would remain, so an unavailable family is an error too.
        XCTAssertThrowsError(try TransparentListeners.open([v6], inherited: []) { _ throws(SystemError) in throw SystemError("socket", EAFNOSUPPORT) })
        // And IPv4 is never left out.
        XCTAssertThrowsError(try TransparentListeners.open([v4, v6], inherited: []) { address throws(SystemError) in
            if !address.address.isIPv6 { throw SystemError("bind", EADDRNOTAVAIL) }
            return -1
        })
    }

    func testPassedSocketsAreUsedAndOnlyTheOthersBound() throws {
        var asked: [SocketAddress] = []
        let stray = SocketAddress(address: IPAddress("127.0.0.1")!, port: 9)
        let opened = try TransparentListeners.open([v4, v6], inherited: [(fd: 7, address: v4), (fd: 9, address: stray)]) { address throws(SystemError) in
            asked.append(address)
            return 12
        }
        XCTAssertEqual(asked, [v6])
        XCTAssertEqual(opened.sockets.map(\.fd), [7, 12])
        XCTAssertEqual(opened.unlisted.map(\.fd), [9])
        XCTAssertTrue(opened.unavailable.isEmpty)
    }

    /// The real bind: no SO_REUSEPORT, so a second socket cannot join even with SO_REUSEPORT set.
    func testBoundSocketCannotBeJoined() throws {
        let fd = try ExclusiveListener.bind(SocketAddress(address: IPAddress("127.0.0.1")!, port: 0))
        defer { close(fd) }
        let port = try XCTUnwrap(SocketAddress.local(of: fd)).port
        let other = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(other) }
        var on: Int32 = 1
        setsockopt(other, SOL_SOCKET, SO_REUSEPORT, &on, socklen_t(MemoryLayout<Int32>.size))
        setsockopt(other, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        let result = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(other, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        XCTAssertEqual(result, -1)
        XCTAssertEqual(errno, EADDRINUSE)
    }
}
