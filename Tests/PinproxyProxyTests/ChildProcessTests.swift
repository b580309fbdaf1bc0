import Foundation
import PinproxyCore
import PinproxyInterop
import XCTest

/// `ChildProcess.run` with real commands: a timeout kills the command's whole process group
/// whatever it did with its descriptors, and a command that stops reading its stdin kills nothing.
final class ChildProcessTests: XCTestCase {
    /// It sends stderr to a file, closes stdout, then hangs in a child of its own: at the timeout
    /// the whole process group is killed and the run returns.
    func testACommandThatClosesItsOutputAndHangsIsKilledWithItsGroup() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pinproxy-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let pidFile = directory.appendingPathComponent("pid").path
        let script = "exec 2>>'\(directory.path)/err' >&-; echo $$ > '\(pidFile)'; sleep 1000 & wait"
        let result = Locked<ChildProcess.Outcome?>(nil)
        let returned = expectation(description: "the run returns")
        Thread.detachNewThread {
            let outcome = try? runScript(script, timeout: 1)
            result.withLock { $0 = outcome }
            returned.fulfill()
        }
        wait(for: [returned], timeout: 4)  // the timeout, a second to reap the group, and slack
        let outcome = try XCTUnwrap(result.withLock { $0 })
        XCTAssertTrue(outcome.timedOut)
        XCTAssertEqual(outcome.signal, SIGKILL)
        XCTAssertNil(outcome.exitStatus)
        let group = try XCTUnwrap(Int32(String(contentsOfFile: pidFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)))
        let gone = Date().addingTimeInterval(10)
        while !liveProcesses(inGroup: group).isEmpty && Date() < gone { usleep(20_000) }
        XCTAssertEqual(liveProcesses(inGroup: group), [], "processes of the command's group still run")
    }

    /// More than a pipe holds, to a command that answers without reading it: the write fails
    /// with EPIPE, and SIGPIPE (which this test process does not ignore) kills nothing.
    func testACommandMayAnswerWithoutReadingItsInput() throws {
        let outcome = try runScript("echo early >&2; exit 4", input: [UInt8](repeating: UInt8(ascii: "x"), count: 1 << 20), timeout: 5)
        XCTAssertEqual(outcome.exitStatus, 4)
        XCTAssertFalse(outcome.timedOut)
        XCTAssertEqual(outcome.firstErrorLine, "early")
    }

    /// The processes of process group `group` that are not zombies (a zombie is dead: where pid 1
    /// does not reap orphans, the killed shell's `sleep` stays one).
    private func liveProcesses(inGroup group: Int32) -> [String] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.filter { $0.allSatisfy(\.isNumber) }.filter { pid in
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                  let end = stat.lastIndex(of: ")") else { return false }
            let fields = stat[stat.index(after: end)...].split(separator: " ")
            return fields.count > 2 && fields[2] == "\(group)" && fields[0] != "Z"
        }
    }
}

/// `script` run by /bin/sh with `input` on its stdin.
private func runScript(_ script: String, input: [UInt8] = Array("chain\n".utf8), timeout: TimeInterval) throws -> ChildProcess.Outcome {
    try ChildProcess.run(["/bin/sh", "-c", script], environment: [:], input: input, timeout: timeout)
}
