import Foundation
import XCTest
import PinproxyInterop
import PinproxyPolicy
@testable import PinproxyService

/// `PinFailureReporter` with a file destination: what reaches the file, and what is counted.
final class PinFailureReporterTests: XCTestCase {
    /// A verdict on an empty chain under the built-in default config (refused, untrusted-chain).
    private func verdict() throws -> Verdict {
        let config = try ConfigLoader.loadEmbedded()
        return TrustEvaluator.evaluate(.init(chain: []), host: TargetHost("api.test")!, port: 443,
                                       entry: config.policies.defaultEntry, context: config.verdictContext, at: Date())
    }

    private func reporter(_ path: String, _ metrics: ProxyMetrics, verdict: Verdict) -> PinFailureReporter {
        PinFailureReporter(destinations: [.file(path: path)], registry: metrics.registry,
                           limits: { .init(perMinute: 600, fileMaxBytes: 1 << 20) },
                           checkCollector: { _, _, _ in verdict }, resolve: { $0 }, log: { _, _ in })
    }

    private func reports(_ metrics: ProxyMetrics, _ result: String) throws -> Double? {
        try PrometheusParser.parse(metrics.render()).value("pinproxy_reports_total", ["result": result])
    }

    func testAReportThatCannotBeSerialisedIsCountedNotSentEmpty() throws {
        let directory = try TemporaryDirectory()
        let path = directory.path + "/reports.jsonl"
        let metrics = ProxyMetrics.forTests()
        let verdict = try verdict()
        let reporter = reporter(path, metrics, verdict: verdict)
        let host = TargetHost("api.test")!
        reporter.submit(host: host, port: 443) { nil }
        reporter.submit(host: host, port: 443) { PinFailureReport.json(verdict: verdict, host: host, port: 443, at: Date()) }
        reporter.stop()

        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
        XCTAssertEqual(lines.count, 2, "one report and the final newline: \(lines)")
        let report = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: Any])
        XCTAssertEqual(report["hostname"] as? String, "api.test")
        XCTAssertEqual(report["pinproxy-reason"] as? String, "untrusted-chain")
        XCTAssertEqual(try reports(metrics, "dropped"), 1)
        XCTAssertEqual(try reports(metrics, "queued"), 1)
        XCTAssertEqual(try reports(metrics, "sent"), 1)
    }

    func testTheOverallLimitCoversEveryHostAndEachHostKeepsItsOwn() {
        var limiter = RateLimiter()
        // Ten hosts, three each, under an overall limit of 12 and a per-host limit of 2.
        var admitted: [String: Int] = [:]
        for round in 0..<3 {
            for host in (0..<10).map({ "10.0.0.\($0)" }) where limiter.admit(host, perHost: 2, overall: 12, now: Double(round)) {
                admitted[host, default: 0] += 1
            }
        }
        XCTAssertEqual(admitted.values.reduce(0, +), 12)
        XCTAssertTrue(admitted.values.allSatisfy { $0 <= 2 }, "\(admitted)")
        // A host refused by the overall limit has used none of its own allowance.
        XCTAssertFalse(limiter.admit("fresh.test", perHost: 2, overall: 12, now: 59))
        XCTAssertTrue(limiter.admit("fresh.test", perHost: 2, overall: 12, now: 60))
        XCTAssertTrue(limiter.admit("fresh.test", perHost: 2, overall: 12, now: 60))
        XCTAssertFalse(limiter.admit("fresh.test", perHost: 2, overall: 12, now: 61))
    }

    func testManyHostsOnceEachStayWithinTheOverallLimit() {
        var limiter = RateLimiter()
        let admitted = (0..<50_000).filter { limiter.admit("host\($0).test", perHost: 10, overall: 600, now: 1) }.count
        XCTAssertEqual(admitted, 600)
    }
}
