import Foundation
import PinproxyCore
import Glibc
import PinproxyInterop
import PinproxyPolicy
import XCTest

/// `unit:` identity on fabricated cgroup trees (`CgroupTree.walk` takes a root, so these never
/// touch the machine's own hierarchy): a process in any cgroup below `/system.slice/X.service`,
/// at any depth, is unit X; a cgroup the walk did not meet is unknown, never "no unit".
final class CgroupUnitTests: XCTestCase {
    var root = ""

    override func setUpWithError() throws {
        root = FileManager.default.temporaryDirectory.appendingPathComponent("pinproxy-cgroups-\(getpid())-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: root)
    }

    /// Makes the cgroup `path` (and its parents) and returns its id.
    @discardableResult
    func make(_ path: String) throws -> UInt64 {
        try FileManager.default.createDirectory(atPath: root + path, withIntermediateDirectories: true)
        return try id(path)
    }

    func id(_ path: String) throws -> UInt64 {
        var info = stat()
        guard stat(root + path, &info) == 0 else { throw FixtureError(description: "no \(root + path)") }
        return UInt64(info.st_ino)
    }

    func unit(of id: UInt64, limit: Int = 100_000, beforeListing: ((FilePathBytes) -> Void)? = nil) -> (CgroupUnit, CgroupWalk) {
        let walk = CgroupTree.walk(root: root, first: "/system.slice", until: id, limit: limit, beforeListing: beforeListing)
        return (CgroupUnit.of(cgroup: id, after: walk), walk)
    }

    func testASubtreeTwelveLevelsDeepIsItsUnit() throws {
        let levels = (1...12).map { "level\($0)" }.joined(separator: "/")
        let deepest = try make("/system.slice/ci-runner.service/" + levels)
        try make("/system.slice/other.service/a/b")
        let (answer, walk) = unit(of: deepest)
        XCTAssertEqual(answer, .unit("ci-runner.service"))
        XCTAssertEqual(walk.end, .found)
        XCTAssertEqual(walk.cgroups.last?.path, FilePathBytes("/system.slice/ci-runner.service/" + levels))
        // Every level of it, the service's own cgroup included, is the unit.
        var path = "/system.slice/ci-runner.service"
        for level in [""] + (1...12).map({ "/level\($0)" }) {
            path += level
            XCTAssertEqual(self.unit(of: try id(path)).0, .unit("ci-runner.service"), path)
        }
    }

    func testATemplateInstanceBesideFiftyDeepSiblingChains() throws {
        for chain in 0..<50 {
            try make("/system.slice/job\(chain).service/" + (1...10).map { "step\($0)" }.joined(separator: "/"))
        }
        let getty = try make("/system.slice/system-getty.slice/getty@tty1.service")
        let inside = try make("/system.slice/system-getty.slice/getty@tty1.service/payload")
        XCTAssertEqual(unit(of: getty).0, .unit("getty@tty1.service"))
        XCTAssertEqual(unit(of: inside).0, .unit("getty@tty1.service"))
        let (deep, walk) = unit(of: try id("/system.slice/job49.service/" + (1...10).map { "step\($0)" }.joined(separator: "/")))
        XCTAssertEqual(deep, .unit("job49.service"))
        XCTAssertEqual(walk.end, .found)
    }

    func testCgroupsOutsideServicesAreNoUnitAndTheWalkGoesOnThere() throws {
        let session = try make("/user.slice/user-1000.slice/session-3.scope")
        let userUnit = try make("/user.slice/user-1000.slice/user@1000.service/app.slice/evil.service")
        try make("/system.slice/a.service")
        XCTAssertEqual(unit(of: session).0, .noUnit)
        XCTAssertEqual(unit(of: userUnit).0, .noUnit, "user units are never system units")
        XCTAssertEqual(unit(of: try id("/system.slice")).0, .noUnit)
        XCTAssertEqual(unit(of: try id("/")).0, .noUnit)
    }

    func testACgroupRemovedBeforeTheWalkIsUnknown() throws {
        let gone = try make("/system.slice/ci.service/job")
        try make("/system.slice/a.service")
        rmdir(root + "/system.slice/ci.service/job")
        let (answer, walk) = unit(of: gone)
        XCTAssertEqual(walk.end, .complete)
        guard case .unknown(let why) = answer else { return XCTFail("\(answer)") }
        XCTAssertTrue(why.contains("no longer in the hierarchy"), why)
        XCTAssertFalse(answer.isSettled)
    }

    func testADirectoryRemovedMidWalkMakesAMissUnknownAndTheWalkGoesOn() throws {
        let target = try make("/system.slice/ci.service/job/step")
        let later = try make("/user.slice/user-1000.slice/session-1.scope")
        var removed = false
        let remove: (FilePathBytes) -> Void = { [root] path in
            guard path == FilePathBytes("/system.slice/ci.service/job"), !removed else { return }
            removed = true
            XCTAssertEqual(rmdir(root + "/system.slice/ci.service/job/step"), 0)
            XCTAssertEqual(rmdir(root + "/system.slice/ci.service/job"), 0)
        }
        let (answer, walk) = unit(of: target, beforeListing: remove)
        XCTAssertTrue(removed)
        XCTAssertEqual(walk.gap, .vanished(FilePathBytes("/system.slice/ci.service/job")))
        guard case .unknown(let why) = answer else { return XCTFail("\(answer)") }
        XCTAssertTrue(why.contains("vanished"), why)
        XCTAssertTrue(walk.cgroups.contains { $0.id == later }, "the walk ended at the vanished cgroup")

        // A gap elsewhere does not hide a cgroup the walk still meets.
        try make("/system.slice/ci.service/job/step")
        let found = try make("/system.slice/zz.service/x")
        removed = false
        XCTAssertEqual(unit(of: found, beforeListing: remove).0, .unit("zz.service"))
    }

    func testAHierarchyWithoutSystemSliceIsWalkedWithoutAGap() throws {
        let session = try make("/user.slice/user-1000.slice/session-3.scope")
        let (answer, walk) = unit(of: session)
        XCTAssertEqual(answer, .noUnit)
        XCTAssertEqual(walk.end, .found)
        XCTAssertNil(walk.gap)
        let everything = CgroupTree.walk(root: root, first: "/system.slice", until: 0, limit: 1_000)
        XCTAssertEqual(everything.end, .complete)
        XCTAssertNil(everything.gap)
        XCTAssertEqual(everything.cgroups.map(\.path), ["/", "/user.slice", "/user.slice/user-1000.slice",
                                                         "/user.slice/user-1000.slice/session-3.scope"].map(FilePathBytes.init))
        // A missing root is a gap: nothing was walked.
        let nowhere = CgroupTree.walk(root: root + "/absent", first: "/system.slice", until: 0, limit: 1_000)
        XCTAssertEqual(nowhere.gap, .vanished(FilePathBytes("/")))
    }

    func testTheBoundMakesAMissUnknown() throws {
        for index in 0..<30 { try make("/system.slice/s\(index).service") }
        let target = try make("/user.slice/late.scope")
        let (answer, walk) = unit(of: target, limit: 10)
        XCTAssertEqual(walk.end, .bound(10))
        XCTAssertEqual(walk.cgroups.count, 10)
        guard case .unknown(let why) = answer else { return XCTFail("\(answer)") }
        XCTAssertTrue(why.contains("bound"), why)
        XCTAssertEqual(unit(of: target, limit: 100).0, .noUnit)
    }

    func testNamesThatAreNotUTF8AreWalkedAsTheirBytes() throws {
        let name: [UInt8] = Array("odd-".utf8) + [0xFF, 0xFE]
        let parent = FilePathBytes(root + "/system.slice/ci.service")
        try make("/system.slice/ci.service")
        let odd = parent.appending(name)
        XCTAssertEqual(odd.bytes.withUnsafeBufferPointer { buffer in
            (Array(buffer) + [0]).withUnsafeBufferPointer { mkdir(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), 0o755) }
        }, 0)
        let child = odd.appending(Array("below".utf8))
        XCTAssertEqual((child.bytes + [0]).withUnsafeBufferPointer { mkdir(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), 0o755) }, 0)
        var info = stat()
        XCTAssertEqual((child.bytes + [0]).withUnsafeBufferPointer { stat(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), &info) }, 0)
        let (answer, walk) = unit(of: UInt64(info.st_ino))
        XCTAssertEqual(answer, .unit("ci.service"))
        XCTAssertNil(walk.gap)
        XCTAssertEqual(SystemUnit.name(ofCgroup: FilePathBytes(bytes: Array("/system.slice/".utf8) + name)), nil)
    }

    func testThePathRuleOnBytesAgreesWithTheTextRule() {
        for path in ["/system.slice/a.service", "/system.slice/a.slice/b@c.service/x/y", "/system.slice", "/user.slice/a.service",
                     "/system.slice/x.scope/a.service", "/system.slice/.service", "/", "", "system.slice/a.service",
                     "/system.slice//a.service", "/system.slice/a.slice"] {
            XCTAssertEqual(SystemUnit.name(ofCgroup: FilePathBytes(path)), SystemUnit.name(ofCgroup: path), path)
        }
    }
}
