import Glibc
import Foundation
import XCTest
@testable import PinproxyInterop
@testable import PinproxyService

final class InheritedSocketsTests: XCTestCase {
    func testParseHonoursListenPID() throws {
        XCTAssertEqual(try InheritedSockets.parse(environment: ["LISTEN_PID": "77", "LISTEN_FDS": "2"], pid: 77), [3, 4])
        XCTAssertEqual(try InheritedSockets.parse(environment: ["LISTEN_PID": "77", "LISTEN_FDS": "1"], pid: 77), [3])
        XCTAssertEqual(try InheritedSockets.parse(environment: ["LISTEN_PID": "77", "LISTEN_FDS": "0"], pid: 77), [])
        // Inherited from a parent that was activated: not ours.
        XCTAssertEqual(try InheritedSockets.parse(environment: ["LISTEN_PID": "76", "LISTEN_FDS": "2"], pid: 77), [])
        // Not activated at all, or half the protocol.
        XCTAssertEqual(try InheritedSockets.parse(environment: [:], pid: 77), [])
        // Names: one per descriptor, "unknown" where LISTEN_FDNAMES gives none.
        XCTAssertEqual(InheritedSockets.names(environment: ["LISTEN_FDNAMES": "proxy:transparent"], count: 2), ["proxy", "transparent"])
        XCTAssertEqual(InheritedSockets.names(environment: ["LISTEN_FDNAMES": "transparent"], count: 2), ["transparent", "unknown"])
        XCTAssertEqual(InheritedSockets.names(environment: ["LISTEN_FDNAMES": ":transparent"], count: 2), ["unknown", "transparent"])
        XCTAssertEqual(InheritedSockets.names(environment: [:], count: 1), ["unknown"])
        XCTAssertEqual(try InheritedSockets.parse(environment: ["LISTEN_FDS": "1"], pid: 77), [])
        XCTAssertEqual(try InheritedSockets.parse(environment: ["LISTEN_PID": "77"], pid: 77), [])
    }

    func testParseRejectsMalformedValues() {
        func error(_ environment: [String: String]) -> InheritedSocketsError? {
            do throws(InheritedSocketsError) {
                _ = try InheritedSockets.parse(environment: environment, pid: 77)
                return nil
            } catch {
                return error
            }
        }
        XCTAssertEqual(error(["LISTEN_PID": "x", "LISTEN_FDS": "1"]), .malformed(variable: "LISTEN_PID", value: "x"))
        XCTAssertEqual(error(["LISTEN_PID": "0", "LISTEN_FDS": "1"]), .malformed(variable: "LISTEN_PID", value: "0"))
        XCTAssertEqual(error(["LISTEN_PID": "77", "LISTEN_FDS": "-1"]), .malformed(variable: "LISTEN_FDS", value: "-1"))
        XCTAssertEqual(error(["LISTEN_PID": "77", "LISTEN_FDS": "two"]), .malformed(variable: "LISTEN_FDS", value: "two"))
        XCTAssertEqual(error(["LISTEN_PID": "77", "LISTEN_FDS": " 1"]), .malformed(variable: "LISTEN_FDS", value: " 1"))
        XCTAssertEqual(error(["LISTEN_PID": "77", "LISTEN_FDS": "100000"]), .tooMany(100000))
    }

    func testValidateAcceptsOnlyListeningStreamSockets() throws {
        let listening = try makeLoopbackSocket(listen: true)
        defer { close(listening.fd) }
        XCTAssertNoThrow(try InheritedSockets.validateListening(listening.fd))

        let bound = try makeLoopbackSocket(listen: false)
        defer { close(bound.fd) }
        XCTAssertThrowsError(try InheritedSockets.validateListening(bound.fd)) {
            XCTAssertEqual($0 as? InheritedSocketsError, .notListeningStream(fd: bound.fd))
        }

        var pipeFDs: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&pipeFDs), 0)
        defer { close(pipeFDs[0]); close(pipeFDs[1]) }
        XCTAssertThrowsError(try InheritedSockets.validateListening(pipeFDs[0])) {
            XCTAssertEqual($0 as? InheritedSocketsError, .notListeningStream(fd: pipeFDs[0]))
        }

        let datagram = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(datagram) }
        XCTAssertThrowsError(try InheritedSockets.validateListening(datagram)) {
            XCTAssertEqual($0 as? InheritedSocketsError, .notListeningStream(fd: datagram))
        }

        let closedFD = dup(listening.fd)
        close(closedFD)
        XCTAssertThrowsError(try InheritedSockets.validateListening(closedFD)) {
            XCTAssertEqual($0 as? InheritedSocketsError, .notOpen(fd: closedFD))
        }
    }

    /// The real protocol once, in process: a listening socket placed at fd 3 (whatever was
    /// there is saved and put back), `LISTEN_PID`/`LISTEN_FDS` naming this process.
    func testTakeReturnsDescriptorThreeSetsCloseOnExecAndUnsetsTheVariables() throws {
        let listening = try makeLoopbackSocket(listen: true)
        defer { close(listening.fd) }
        let saved = fcntl(3, F_DUPFD_CLOEXEC, 10)  // -1 when fd 3 was not open
        defer {
            if saved >= 0 {
                dup2(saved, 3)
                close(saved)
            } else {
                close(3)
            }
        }
        XCTAssertEqual(dup2(listening.fd, 3), 3)  // dup2 clears FD_CLOEXEC on the copy
        XCTAssertEqual(fcntl(3, F_GETFD) & FD_CLOEXEC, 0)
        setenv("LISTEN_PID", String(getpid()), 1)
        setenv("LISTEN_FDS", "1", 1)
        setenv("LISTEN_FDNAMES", "proxy", 1)

        let descriptors = try InheritedSockets.take()

        XCTAssertEqual(descriptors, [InheritedSocket(fd: 3, name: "proxy")])
        XCTAssertNotEqual(fcntl(3, F_GETFD) & FD_CLOEXEC, 0, "FD_CLOEXEC not set")
        for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
            XCTAssertNil(getenv(name), "\(name) still set")
        }
        // It is the same socket: its port is the listener's.
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(3, $0, &length) }
        }
        XCTAssertEqual(UInt16(bigEndian: address.sin_port), listening.port)
        // A second take finds nothing.
        XCTAssertEqual(try InheritedSockets.take(), [])
    }

    func testTakeForAnotherProcessReturnsNothingButStillUnsets() throws {
        setenv("LISTEN_PID", "1", 1)
        setenv("LISTEN_FDS", "1", 1)
        XCTAssertEqual(try InheritedSockets.take(), [])
        XCTAssertNil(getenv("LISTEN_PID"))
        XCTAssertNil(getenv("LISTEN_FDS"))
    }
}
