import Foundation
import XCTest
@testable import PinproxyProxy

/// One `verify_command` run (`CustomChecks.answer`), with real commands: how it ends, and which
/// answers may be cached (exit statuses only).
final class CustomCheckRunTests: XCTestCase {
    func testExitStatusesAreAnswersToCache() {
        let passed = runScript("cat >/dev/null; exit 0")
        XCTAssertTrue(passed.result.passed)
        XCTAssertTrue(passed.exited)
        let refused = runScript("echo 'not in my CT logs' >&2; exit 3")
        XCTAssertFalse(refused.result.passed)
        XCTAssertTrue(refused.exited)
        XCTAssertTrue(refused.result.detail.hasSuffix("exited with status 3: not in my CT logs"), refused.result.detail)
    }

    func testATimeoutAKillOrAFailureToStartIsNeverCached() {
        let late = runScript("sleep 1000", timeout: 0.5)
        XCTAssertFalse(late.result.passed)
        XCTAssertFalse(late.exited)
        XCTAssertTrue(late.result.detail.contains("timed out: did not answer within 0.5s"), late.result.detail)
        let killed = runScript("kill -9 $$")
        XCTAssertFalse(killed.result.passed)
        XCTAssertFalse(killed.exited)
        XCTAssertTrue(killed.result.detail.contains("was killed by signal 9"), killed.result.detail)
        let unstartable = CustomChecks.answer(["/nonexistent/check"], host: "api.test", port: 443, input: [], timeout: 1)
        XCTAssertFalse(unstartable.result.passed)
        XCTAssertFalse(unstartable.exited)
        XCTAssertTrue(unstartable.result.detail.contains("cannot start /nonexistent/check"), unstartable.result.detail)
    }
}

/// `script` run by /bin/sh as a `verify_command`.
private func runScript(_ script: String, timeout: TimeInterval = 5) -> CustomChecks.Answer {
    CustomChecks.answer(["/bin/sh", "-c", script], host: "api.test", port: 443, input: Array("chain\n".utf8), timeout: timeout)
}
