import Glibc
import Foundation
import XCTest
import PinproxyInterop
@testable import PinproxyService

final class SystemdNotifierTests: XCTestCase {
    /// Parses a datagram into its assignments, in order.
    private func fields(_ datagram: String?) -> [(String, String)] {
        (datagram ?? "").split(separator: "\n").map { line in
            let parts = line.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            return (String(parts[0]), parts.count > 1 ? String(parts[1]) : "")
        }
    }

    private func assertLifecycle(on receiver: DatagramReceiver, file: StaticString = #filePath, line: UInt = #line) throws {
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": receiver.address, "WATCHDOG_USEC": "30000000"],
                                       pid: getpid())
        XCTAssertTrue(notifier.isEnabled)

        XCTAssertNil(notifier.ready(status: "listening on 127.0.0.1:3128, 3 host entries"))
        XCTAssertEqual(receiver.receive(), "READY=1\nSTATUS=listening on 127.0.0.1:3128, 3 host entries",
                       file: file, line: line)

        let before = ProcessLimits.monotonicMicroseconds()
        XCTAssertNil(notifier.reloading())
        let after = ProcessLimits.monotonicMicroseconds()
        let reload = fields(receiver.receive())
        XCTAssertEqual(reload.map(\.0), ["RELOADING", "MONOTONIC_USEC"], file: file, line: line)
        XCTAssertEqual(reload.first?.1, "1", file: file, line: line)
        let usec = try XCTUnwrap(UInt64(reload.last?.1 ?? ""), file: file, line: line)
        XCTAssertTrue((before...after).contains(usec), "MONOTONIC_USEC \(usec) not in [\(before), \(after)]",
                      file: file, line: line)

        XCTAssertNil(notifier.ready())
        XCTAssertEqual(receiver.receive(), "READY=1", file: file, line: line)

        XCTAssertNil(notifier.watchdog())
        XCTAssertEqual(receiver.receive(), "WATCHDOG=1", file: file, line: line)

        XCTAssertNil(notifier.status("2 tunnels open\nreload failed"))
        XCTAssertEqual(receiver.receive(), "STATUS=2 tunnels open reload failed", file: file, line: line)

        XCTAssertNil(notifier.stopping(status: "draining 2 tunnels"))
        XCTAssertEqual(receiver.receive(), "STOPPING=1\nSTATUS=draining 2 tunnels", file: file, line: line)
    }

    func testPathSocketReceivesTheLifecycle() throws {
        let directory = try TemporaryDirectory()
        let receiver = try DatagramReceiver(address: directory.path + "/notify")
        try assertLifecycle(on: receiver)
    }

    func testAbstractSocketReceivesTheLifecycle() throws {
        let receiver = try DatagramReceiver(address: "@pinproxy-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try assertLifecycle(on: receiver)
    }

    func testReloadingUsesTheInjectedClock() throws {
        let directory = try TemporaryDirectory()
        let receiver = try DatagramReceiver(address: directory.path + "/notify")
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": receiver.address], pid: 1,
                                       monotonicMicroseconds: { 123_456_789 })
        XCTAssertNil(notifier.reloading(status: "reloading /etc/pinproxy/pinproxy.toml"))
        XCTAssertEqual(receiver.receive(),
                       "RELOADING=1\nMONOTONIC_USEC=123456789\nSTATUS=reloading /etc/pinproxy/pinproxy.toml")
    }

    func testWithoutNotifySocketNothingIsSent() throws {
        let notifier = SystemdNotifier(environment: [:], pid: getpid())
        XCTAssertFalse(notifier.isEnabled)
        XCTAssertNil(notifier.ready(status: "x"))
        XCTAssertNil(notifier.reloading())
        XCTAssertNil(notifier.stopping())
        XCTAssertNil(notifier.status("x"))
        XCTAssertNil(notifier.watchdog())
        XCTAssertNil(SystemdNotifier(environment: ["NOTIFY_SOCKET": ""], pid: 1).socketAddress)
    }

    func testWatchdogIntervalIsHalfOfWatchdogUsecForThisProcessOnly() {
        XCTAssertEqual(SystemdNotifier(environment: ["WATCHDOG_USEC": "30000000"], pid: 42).watchdogInterval,
                       .seconds(15))
        XCTAssertEqual(SystemdNotifier(environment: ["WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "42"], pid: 42)
            .watchdogInterval, .seconds(15))
        XCTAssertNil(SystemdNotifier(environment: ["WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "43"], pid: 42)
            .watchdogInterval)
        XCTAssertNil(SystemdNotifier(environment: ["WATCHDOG_USEC": "0"], pid: 42).watchdogInterval)
        XCTAssertNil(SystemdNotifier(environment: ["WATCHDOG_USEC": "soon"], pid: 42).watchdogInterval)
        XCTAssertNil(SystemdNotifier(environment: [:], pid: 42).watchdogInterval)
    }

    func testWatchdogIsNotSentWhenTheWatchdogIsOff() throws {
        let directory = try TemporaryDirectory()
        let receiver = try DatagramReceiver(address: directory.path + "/notify")
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": receiver.address,
                                                     "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"],
                                       pid: getpid())
        XCTAssertNil(notifier.watchdog())
        XCTAssertNil(notifier.status("marker"))
        // The next datagram is the marker: no WATCHDOG=1 came before it.
        XCTAssertEqual(receiver.receive(), "STATUS=marker")
    }

    func testErrorsAreReturnedNotFatal() throws {
        let directory = try TemporaryDirectory()
        let missing = SystemdNotifier(environment: ["NOTIFY_SOCKET": directory.path + "/nobody-listens"], pid: 1)
        XCTAssertEqual(missing.ready(), .system(call: "sendto", errno: ENOENT))

        XCTAssertEqual(SystemdNotifier(environment: ["NOTIFY_SOCKET": "relative/path"], pid: 1).ready(),
                       .unsupportedAddress("relative/path"))
        XCTAssertEqual(SystemdNotifier(environment: ["NOTIFY_SOCKET": "@"], pid: 1).ready(),
                       .unsupportedAddress("@"))
        let long = "/" + String(repeating: "a", count: 200)
        XCTAssertEqual(SystemdNotifier(environment: ["NOTIFY_SOCKET": long], pid: 1).ready(), .addressTooLong(long))
        // 107 path bytes plus the NUL fill sun_path exactly; an abstract name may use all 108.
        let exact = "/" + String(repeating: "b", count: 106)
        XCTAssertEqual(SystemdNotifier(environment: ["NOTIFY_SOCKET": exact], pid: 1).ready(),
                       .system(call: "sendto", errno: ENOENT))
        XCTAssertNotEqual(SystemdNotifier(environment: ["NOTIFY_SOCKET": "@" + String(repeating: "c", count: 107)],
                                          pid: 1).ready(), .addressTooLong("@" + String(repeating: "c", count: 107)))
    }

    func testMonotonicClockMatchesClockMonotonic() {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let reference = UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1_000
        let measured = ProcessLimits.monotonicMicroseconds()
        XCTAssertGreaterThanOrEqual(measured, reference)
        XCTAssertLessThan(measured - reference, 5_000_000)
    }
}
