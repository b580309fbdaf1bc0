import Foundation
import PinproxyPolicy
import XCTest

/// `RefusalReason.traits` is the one table of what pinproxy does with each reason: these tests
/// hold its rows to the rules that bind the columns together, and the printed table
/// (`pinproxy reasons`, the docs) to it, without keeping a copy of it.
final class RefusalReasonTests: XCTestCase {
    func testTheRulesEveryRowKeeps() {
        for reason in RefusalReason.allCases {
            let traits = reason.traits
            XCTAssertTrue([400, 403, 429, 502, 504].contains(traits.httpStatus), "\(reason)")
            // A certificate the server presented is why: the verdict decides it, and Proxy-Status says so.
            XCTAssertEqual(traits.isCertificateReason, traits.proxyStatusError == .tlsCertificateError, "\(reason)")
            if traits.isCertificateReason { XCTAssertTrue(traits.isPolicyDecision, "\(reason)") }
            // Only the entry's own checks can be made report-only by its enforce = false.
            if traits.mayBeReportOnly { XCTAssertTrue(traits.isPolicyDecision, "\(reason)") }
            // A 5xx is the upstream's failure, never a policy decision.
            if traits.httpStatus >= 500 { XCTAssertFalse(traits.isPolicyDecision || traits.mayBeReportOnly, "\(reason)") }
            XCTAssertNotEqual(traits.proxyStatusError, .dnsTimeout, "\(reason): dns_timeout is said only of a lookup that timed out")
        }
        // The chain, its dates, the host name and a revocation are always enforced.
        for reason in [RefusalReason.untrustedChain, .certificateExpired, .certificateNotYetValid, .revoked, .hostnameMismatch] {
            XCTAssertFalse(reason.traits.mayBeReportOnly, "\(reason)")
        }
    }

    /// `pinproxy reasons --json` gives each reason's traits, in priority order, and reads back.
    func testTheRowsAreTheTraits() throws {
        let rows = RefusalReason.rows
        XCTAssertEqual(rows.map(\.reason), RefusalReason.allCases.map(\.rawValue))
        for (row, reason) in zip(rows, RefusalReason.allCases) {
            let traits = reason.traits
            XCTAssertEqual(row.status, traits.httpStatus)
            XCTAssertEqual(row.proxyStatusError, traits.proxyStatusError.rawValue)
            XCTAssertEqual(row.mayBeReportOnly, traits.mayBeReportOnly)
            XCTAssertEqual(row.decidedBy, traits.isPolicyDecision ? "verdict" : "proxy")
            XCTAssertEqual(row.sendsReport, traits.isCertificateReason)
        }
        let json = try JSONEncoder().encode(rows)
        XCTAssertEqual(try JSONDecoder().decode([RefusalReason.Row].self, from: json), rows)
        let objects = try XCTUnwrap(try JSONSerialization.jsonObject(with: json) as? [[String: Any]])
        XCTAssertEqual(Set(try XCTUnwrap(objects.first).keys),
                       ["reason", "status", "proxy_status_error", "may_be_report_only", "decided_by", "sends_report"])
        XCTAssertEqual(RefusalReason.textTable.split(separator: "\n").count, RefusalReason.allCases.count + 1)
    }

    /// The priority order is declaration order, and total.
    func testPriorityIsDeclarationOrder() {
        XCTAssertEqual(RefusalReason.allCases.shuffled().sorted(), RefusalReason.allCases)
        for reason in RefusalReason.allCases { XCTAssertFalse(reason < reason, "\(reason)") }
    }
}
