import Glibc
import Foundation
import XCTest
import PinproxyInterop
import PinproxyService

final class JournalTests: XCTestCase {
    func testParse() {
        XCTAssertEqual(JournalStream.parse("8:12345")?.device, 8)
        XCTAssertEqual(JournalStream.parse("8:12345")?.inode, 12345)
        XCTAssertNil(JournalStream.parse("8"))
        XCTAssertNil(JournalStream.parse("8:"))
        XCTAssertNil(JournalStream.parse(":5"))
        XCTAssertNil(JournalStream.parse("a:b"))
        XCTAssertNil(JournalStream.parse("1:2:3"))
    }

    func testMatchesOnlyTheDescriptorJournalStreamNames() throws {
        let directory = try TemporaryDirectory()
        let path = directory.path + "/stream"
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data()))
        let fd = open(path, O_WRONLY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        var status = stat()
        XCTAssertEqual(fstat(fd, &status), 0)
        let value = "\(status.st_dev):\(status.st_ino)"

        XCTAssertTrue(JournalStream.matches(value, fd: fd))
        XCTAssertFalse(JournalStream.matches("\(status.st_dev):\(status.st_ino + 1)", fd: fd))
        XCTAssertFalse(JournalStream.matches("\(status.st_dev + 1):\(status.st_ino)", fd: fd))
        XCTAssertFalse(JournalStream.matches(nil, fd: fd))
        XCTAssertFalse(JournalStream.matches("garbage", fd: fd))
        XCTAssertFalse(JournalStream.matches(value, fd: -1))
    }

    func testStderrDetection() throws {
        let identity = try XCTUnwrap(JournalStream.identity(of: STDERR_FILENO))
        let matching = ["JOURNAL_STREAM": "\(identity.device):\(identity.inode)"]
        XCTAssertTrue(JournalStream.stderrIsJournal(environment: matching))
        XCTAssertTrue(SyslogPrefixer.detect(environment: matching).enabled)
        // Inherited by a process whose stderr went elsewhere.
        let other = ["JOURNAL_STREAM": "\(identity.device):\(identity.inode &+ 1)"]
        XCTAssertFalse(SyslogPrefixer.detect(environment: other).enabled)
        XCTAssertFalse(SyslogPrefixer.detect(environment: [:]).enabled)
    }

    func testPriorityPrefixes() {
        XCTAssertEqual(SyslogPriority.warning.prefix, "<4>")
        XCTAssertEqual(SyslogPriority.info.prefix, "<6>")
        XCTAssertEqual(SyslogPriority.error.prefix, "<3>")
    }

    func testPrefixingOnlyUnderJournald() {
        let journal = SyslogPrefixer(enabled: true)
        let plain = SyslogPrefixer(enabled: false)
        let line = #"decision=refuse host=api.example.com reason=pin-mismatch"#
        XCTAssertEqual(journal.format(line, priority: .warning), "<4>" + line)
        XCTAssertEqual(journal.format("decision=allow host=a.test", priority: .info), "<6>decision=allow host=a.test")
        XCTAssertEqual(journal.format("reload failed", priority: .error), "<3>reload failed")
        XCTAssertEqual(plain.format(line, priority: .warning), line)
        XCTAssertEqual(journal.format("one\ntwo\n", priority: .warning), "<4>one\n<4>two\n")
        XCTAssertEqual(journal.format("x", priority: .debug), "<7>x")
    }
}
