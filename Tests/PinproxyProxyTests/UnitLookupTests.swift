import Foundation
import PinproxyCore
import Glibc
import PinproxyInterop
import PinproxyPolicy
import XCTest
@testable import PinproxyProxy

/// `IdentityLookups` on a fabricated cgroup tree: a settled unit is cached for good, a miss
/// that the walk cannot settle is not, and the client it leaves unknown says why.
final class UnitLookupTests: XCTestCase {
    func testAnUnknownUnitIsNotCachedAndAFoundOneIs() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("pinproxy-units-\(getpid())-\(UUID().uuidString.prefix(8))").path
        defer { try? FileManager.default.removeItem(atPath: root) }
        func make(_ path: String) throws -> UInt64 {
            try FileManager.default.createDirectory(atPath: root + path, withIntermediateDirectories: true)
            var info = stat()
            XCTAssertEqual(stat(root + path, &info), 0)
            return UInt64(info.st_ino)
        }
        let deep = try make("/system.slice/ci.service/" + (1...9).map { "d\($0)" }.joined(separator: "/"))
        let gone = try make("/system.slice/ci.service/gone")
        XCTAssertEqual(rmdir(root + "/system.slice/ci.service/gone"), 0)
        let lookups = IdentityLookups(cgroupRoot: root)
        let loop = try EventLoop()

        func lookUp(_ cgroup: UInt64) throws -> IdentityLookups.Parts {
            var parts: IdentityLookups.Parts?
            let owner = SocketOwner(state: SocketOwner.established, uid: 1000, inode: 42, cgroupID: cgroup)
            XCTAssertTrue(lookups.lookUp(owner, name: false, unit: true, executable: false, deadline: ProcessLimits.monotonicSeconds() + 20,
                                         on: loop) { found in parts = found; loop.stop() })
            loop.run()
            return try XCTUnwrap(parts)
        }

        XCTAssertEqual(try lookUp(deep).unit, .unit("ci.service"))
        XCTAssertEqual(lookups.cachedUnit(of: deep), .some("ci.service"))
        let missed = try lookUp(gone)
        guard case .unknown(let why) = missed.unit else { return XCTFail("\(String(describing: missed.unit))") }
        XCTAssertTrue(why.contains("no longer in the hierarchy"), why)
        XCTAssertNil(lookups.cachedUnit(of: gone), "a miss the walk could not settle is cached")
        let pending = PendingIdentity(owner: SocketOwner(state: SocketOwner.established, uid: 1000, inode: 42, cgroupID: gone), user: nil, unit: nil)
        guard case .partlyKnown(let known, let said) = pending.identity(with: missed) else { return XCTFail() }
        XCTAssertTrue(said.contains("its unit cannot be told") && said.contains("no longer in the hierarchy"), said)
        XCTAssertEqual(known, LocalClient(uid: 1000))
    }
}
