import Foundation
import PinproxyCore
import XCTest
import PinproxyInterop
@testable import PinproxyPolicy

/// Chrome's CT policy as `CTPolicy.judge` applies it, on SCT values alone (no I/O), and the log
/// list reader.
final class CTPolicyTests: XCTestCase {
    static let day: TimeInterval = 86_400
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    /// Log N of operator `op` in `state` since `since`; its id is N repeated.
    static func log(_ n: UInt8, _ op: String, _ state: CTLogList.State = .usable, since: Date = now - 400 * day) -> CTLogList.Log {
        CTLogList.Log(id: Array(repeating: n, count: 32), key: [n], description: "log \(n)", operatorName: op, state: state, stateSince: since)
    }

    static func sct(_ n: UInt8, _ source: SCTSource = .embedded, _ signature: SCTObservation.Signature = .valid,
                    at time: Date = now - 30 * day) -> SCTObservation {
        SCTObservation(logID: Array(repeating: n, count: 32), timestamp: time, source: source, signature: signature)
    }

    /// Logs 1, 2 of A, 3, 4 of B, 5 of C.
    static let logs = CTLogList(logs: [log(1, "A"), log(2, "A"), log(3, "B"), log(4, "B"), log(5, "C")], published: now - 10 * day)

    func judge(_ scts: [SCTObservation], logs: CTLogList = logs, lifetime: TimeInterval = 90 * day, system: Bool = true) -> CTPolicy.Judgement {
        CTPolicy.judge(scts, logs: logs, notBefore: Self.now - 40 * Self.day, notAfter: Self.now - 40 * Self.day + lifetime,
                       endsAtSystemAnchor: system, at: Self.now)
    }

    func assertCompliant(_ judgement: CTPolicy.Judgement, file: StaticString = #filePath, line: UInt = #line) {
        guard case .compliant = judgement.outcome else { return XCTFail("expected compliant, got \(judgement.outcome)", file: file, line: line) }
    }

    func assertMissing(_ judgement: CTPolicy.Judgement, _ text: String, file: StaticString = #filePath, line: UInt = #line) {
        guard case .notCompliant(let why) = judgement.outcome else { return XCTFail("expected not compliant, got \(judgement.outcome)", file: file, line: line) }
        XCTAssert(why.contains(text), "\(why) does not say \(text)", file: file, line: line)
    }

    // MARK: Each delivery

    func testTwoEmbeddedFromTwoOperatorsForAShortCertificate() {
        assertCompliant(judge([Self.sct(1), Self.sct(3)]))
    }

    func testTwoTLSExtensionSCTsFromTwoOperators() {
        assertCompliant(judge([Self.sct(1, .tlsExtension), Self.sct(3, .tlsExtension)]))
    }

    func testTwoOCSPSCTsFromTwoOperators() {
        assertCompliant(judge([Self.sct(2, .ocsp), Self.sct(5, .ocsp)]))
    }

    func testTLSAndOCSPTogether() {
        assertCompliant(judge([Self.sct(1, .tlsExtension), Self.sct(5, .ocsp)]))
    }

    // MARK: Not enough

    func testOneSCTShort() {
        assertMissing(judge([Self.sct(1)]), "1 of 2 logs")
        assertMissing(judge([Self.sct(1), Self.sct(3)], lifetime: 200 * Self.day), "2 of 3 logs")
        assertCompliant(judge([Self.sct(1), Self.sct(3), Self.sct(5)], lifetime: 200 * Self.day))
        assertMissing(judge([Self.sct(1, .tlsExtension)]), "1 of 2 logs")
    }

    func testLifetimeBoundaryIs180DaysInclusive() {
        assertCompliant(judge([Self.sct(1), Self.sct(3)], lifetime: 180 * Self.day))
        assertMissing(judge([Self.sct(1), Self.sct(3)], lifetime: 180 * Self.day + 1), "2 of 3 logs")
    }

    func testTwoSCTsOfOneOperator() {
        assertMissing(judge([Self.sct(1), Self.sct(2)]), "1 of 2 operators")
        assertMissing(judge([Self.sct(3, .tlsExtension), Self.sct(4, .tlsExtension)]), "1 of 2 operators")
    }

    func testTheSameLogTwiceCountsOnce() {
        assertMissing(judge([Self.sct(1), Self.sct(1, at: Self.now - 20 * Self.day)]), "1 of 2 logs")
    }

    func testEmbeddedAndDeliveredDoNotCombine() {
        assertMissing(judge([Self.sct(1), Self.sct(3, .tlsExtension)]), "embedded SCTs: 1 of 2 logs")
    }

    func testNoSCT() {
        assertMissing(judge([]), "no SCT was presented")
    }

    // MARK: SCTs that do not count

    func testABadSignatureBesideEnoughGoodOnesIsAllowed() {
        let judgement = judge([Self.sct(1), Self.sct(2, .embedded, .invalid), Self.sct(3)])
        assertCompliant(judgement)
        XCTAssertEqual(judgement.entries.map(\.counted), [true, false, true])
        XCTAssertEqual(judgement.entries[1].whyNot, "bad signature")
    }

    func testABadSignatureInsteadOfAGoodOneRefuses() {
        let judgement = judge([Self.sct(1), Self.sct(3, .embedded, .invalid)])
        assertMissing(judgement, "1 of 2 logs")
    }

    func testAnUnknownLogDoesNotCount() {
        let judgement = judge([Self.sct(1), Self.sct(9, .embedded, .unknownLog)])
        assertMissing(judgement, "1 of 2 logs")
        XCTAssertEqual(judgement.entries[1].whyNot, "unknown log")
        XCTAssertNil(judgement.entries[1].log)
    }

    func testALogRetiredAfterTheSCTCountsForEmbedded() {
        let logs = CTLogList(logs: [Self.log(1, "A"), Self.log(3, "B", .retired, since: Self.now - 10 * Self.day)], published: Self.now)
        assertCompliant(judge([Self.sct(1), Self.sct(3, at: Self.now - 30 * Self.day)], logs: logs))
    }

    func testALogRetiredBeforeTheSCTDoesNotCount() {
        let logs = CTLogList(logs: [Self.log(1, "A"), Self.log(3, "B", .retired, since: Self.now - 60 * Self.day)], published: Self.now)
        let judgement = judge([Self.sct(1), Self.sct(3, at: Self.now - 30 * Self.day)], logs: logs)
        assertMissing(judgement, "1 of 2 logs")
        XCTAssert(judgement.entries[1].whyNot?.contains("retired") == true)
    }

    func testRetiredLogsNeverCountOutsideTheCertificate() {
        let logs = CTLogList(logs: [Self.log(1, "A"), Self.log(3, "B", .retired, since: Self.now - 10 * Self.day)], published: Self.now)
        assertMissing(judge([Self.sct(1, .tlsExtension), Self.sct(3, .tlsExtension, at: Self.now - 30 * Self.day)], logs: logs), "1 of 2 logs")
    }

    func testEmbeddedNeedsOneCurrentlyApprovedLog() {
        let retired = Self.now - 10 * Self.day
        let logs = CTLogList(logs: [Self.log(1, "A", .retired, since: retired), Self.log(3, "B", .retired, since: retired)], published: Self.now)
        assertMissing(judge([Self.sct(1), Self.sct(3)], logs: logs), "none from a qualified, usable or readonly log")
    }

    func testPendingAndRejectedLogsDoNotCount() {
        let logs = CTLogList(logs: [Self.log(1, "A"), Self.log(3, "B", .pending), Self.log(5, "C", .rejected)], published: Self.now)
        let judgement = judge([Self.sct(1), Self.sct(3), Self.sct(5)], logs: logs)
        assertMissing(judgement, "1 of 2 logs")
        XCTAssertEqual(judgement.entries.compactMap(\.whyNot), ["the log is pending", "the log is rejected"])
    }

    func testQualifiedAndReadOnlyLogsCount() {
        let logs = CTLogList(logs: [Self.log(1, "A", .qualified), Self.log(3, "B", .readonly)], published: Self.now)
        assertCompliant(judge([Self.sct(1, .tlsExtension), Self.sct(3, .tlsExtension)], logs: logs))
    }

    func testAChainToAnotherAnchorIsNotJudged() {
        guard case .notApplicable = judge([], system: false).outcome else { return XCTFail("CT applied to a corporate chain") }
    }

    // MARK: The verdict

    func testCTMissingIsACertificateReasonThatMayReportOnly() {
        XCTAssertTrue(RefusalReason.ctMissing.traits.isCertificateReason)
        XCTAssertTrue(RefusalReason.ctMissing.traits.mayBeReportOnly)
        XCTAssertEqual(RefusalReason.ctMissing.rawValue, "ct-missing")
    }

    // MARK: The log list

    static let key1 = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEHblsqctplMVc5ramA7vSuNxUQxcomQwGAVAdnWTAWUYr3MgDHQW0LagJ95lB7QT75Ve6JgT2EVLOFGU7L3YrwA=="
    static let key2 = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEIIKh+WdoqOTblJji4WiH5AltIDUzODyvFKrXCBjw/Rab0/98J4LUh7dOJEY7+66+yCNSICuqRAX+VPnV8R1Fmg=="

    static func id(_ key: String) -> String { Data(SHA256.hash(Array(Data(base64Encoded: key)!))).base64EncodedString() }

    static func listJSON(timestamp: String = "2026-11-01T00:00:00Z", id1: String? = nil, state2: String = #"{"retired": {"timestamp": "2026-10-01T12:00:00.5Z"}}"#) -> [UInt8] {
        Array("""
        {"version": "1.0", "log_list_timestamp": "\(timestamp)",
         "operators": [
          {"name": "Operator A", "email": ["a@example.com"],
           "logs": [{"description": "A 2026", "log_id": "\(id1 ?? id(key1))", "key": "\(key1)", "url": "https://a.example/", "mmd": 86400,
                     "state": {"usable": {"timestamp": "2025-01-01T00:00:00Z"}},
                     "temporal_interval": {"start_inclusive": "2026-01-01T00:00:00Z", "end_exclusive": "2027-01-01T00:00:00Z"}}],
           "tiled_logs": []},
          {"name": "Operator B", "email": [],
           "logs": [],
           "tiled_logs": [{"description": "B tiled", "log_id": "\(id(key2))", "key": "\(key2)", "submission_url": "https://b.example/",
                           "monitoring_url": "https://b.example/m/", "mmd": 60, "state": \(state2)}]}
         ]}
        """.utf8)
    }

    func testReadsLogsAndTiledLogs() throws {
        let list = try CTLogList.parse(Self.listJSON())
        XCTAssertEqual(list.logs.map(\.description), ["A 2026", "B tiled"])
        XCTAssertEqual(list.logs.map(\.operatorName), ["Operator A", "Operator B"])
        XCTAssertEqual(list.logs.map(\.state), [.usable, .retired])
        XCTAssertEqual(list.logs[1].stateSince.timeIntervalSince1970, 1_790_856_000.5, accuracy: 0.001)
        XCTAssertEqual(list.log(id: Array(Data(base64Encoded: Self.id(Self.key2))!))?.description, "B tiled")
        XCTAssertEqual(list.published, CTLogList.parseTimestamp("2026-11-01T00:00:00Z"))
    }

    func testAgeOver70DaysIsStale() throws {
        let list = try CTLogList.parse(Self.listJSON())
        XCTAssertFalse(list.isStale(at: list.published + 70 * Self.day))
        XCTAssertTrue(list.isStale(at: list.published + 70 * Self.day + 1))
    }

    func testRejectsWhatIsNotALogList() {
        func error(_ bytes: [UInt8]) -> String {
            do {
                _ = try CTLogList.parse(bytes)
                return "parsed"
            } catch {
                return error.description
            }
        }
        XCTAssert(error(Array("[1, 2]".utf8)).contains("format of Chrome's log_list.json v3"))
        XCTAssert(error(Array("not json".utf8)).contains("log_list.json"))
        XCTAssert(error(Self.listJSON(timestamp: "yesterday")).contains("log_list_timestamp"))
        XCTAssert(error(Self.listJSON(id1: Self.id(Self.key2))).contains("not the SHA-256 of its key"))
        XCTAssert(error(Self.listJSON(state2: #"{"frozen": {"timestamp": "2026-10-01T00:00:00Z"}}"#)).contains("unknown state \"frozen\""))
        XCTAssert(error(Self.listJSON(state2: #"{}"#)).contains("exactly one"))
        XCTAssert(error(Array(#"{"log_list_timestamp": "2026-11-01T00:00:00Z", "operators": []}"#.utf8)).contains("lists no log"))
    }

    func testBuildsOpenSSLsStoreFromTheKeys() throws {
        let list = try CTLogList.parse(Self.listJSON())
        XCTAssertNoThrow(try CTLogs(path: "test.json", list: list))
        let bad = CTLogList(logs: [Self.log(1, "A")], published: Self.now)
        XCTAssertThrowsError(try CTLogs(path: "test.json", list: bad))
    }
}
