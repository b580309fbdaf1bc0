import Foundation
import Glibc
import PinproxyCore
import XCTest
import PinproxyInterop

/// What identifying a client reads from the system, against this system: which process holds a
/// socket and its program (/proc), the cgroup v2 tree, this host's addresses.
final class ClientLookupTests: XCTestCase {
    /// A program replaced after it started (a package upgrade) is named by its path, without
    /// the " (deleted)" the kernel appends.
    func testADeletedProgramIsNamedWithoutTheSuffix() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pinproxy-exe-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let copy = directory.appendingPathComponent("sleep copy").path
        try FileManager.default.copyItem(atPath: try XCTUnwrap(ProcessExecutables.realPath("/bin/sleep")), toPath: copy)
        let process = try Process.run(URL(fileURLWithPath: copy), arguments: ["30"])
        defer { process.terminate(); process.waitUntilExit() }
        let real = try XCTUnwrap(ProcessExecutables.realPath(copy))
        let deadline = Date().addingTimeInterval(10)
        while ProcessExecutables.executable(ofProcess: process.processIdentifier) != real && Date() < deadline { usleep(10_000) }
        XCTAssertEqual(ProcessExecutables.executable(ofProcess: process.processIdentifier), real)
        try FileManager.default.removeItem(atPath: copy)
        XCTAssertEqual(ProcessExecutables.executable(ofProcess: process.processIdentifier), real)
    }

    /// Read only: the machine's own hierarchy is never changed by a test.
    func testTheCgroupTreeGivesEachCgroupItsInodeAsId() throws {
        guard let root = CgroupTree.root() else { throw XCTSkip("no cgroup v2 hierarchy is mounted here") }
        var info = stat()
        XCTAssertEqual(stat(root, &info), 0)
        let walk = CgroupTree.walk(root: root, first: "/", until: 0, limit: 1_000)
        XCTAssertEqual(walk.cgroups.first?.path, FilePathBytes("/"))
        XCTAssertEqual(walk.cgroups.first?.id, UInt64(info.st_ino))
        for cgroup in walk.cgroups.dropFirst().prefix(20) {
            XCTAssertEqual(stat(root + cgroup.path.description, &info), 0, cgroup.path.description)
            XCTAssertEqual(cgroup.id, UInt64(info.st_ino), cgroup.path.description)
        }
    }

    func testHostAddressesHoldLoopback() {
        XCTAssertTrue(HostAddresses.current().contains(IPAddress("127.0.0.1")!))
    }
}
