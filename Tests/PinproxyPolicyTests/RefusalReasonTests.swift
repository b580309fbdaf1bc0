import PinproxyPolicy
import XCTest

/// `RefusalReason.traits`, the one table of what pinproxy does with each reason, row by row:
/// a change to any reason's treatment (or a new reason) changes this test too.
final class RefusalReasonTests: XCTestCase {
    /// reason: HTTP status, may be report-only, policy decision, certificate reason, metric label.
    static let expected: [(RefusalReason, Int, Bool, Bool, Bool, String)] = [
        // Its report-only comes from its [clients] section, not the entry's enforce.
        (.clientDenied, 403, false, false, false, "client-denied"),
        (.hostDenied, 403, true, true, false, "host-denied"),
        (.portDenied, 403, true, true, false, "port-denied"),
        (.untrustedChain, 403, false, true, true, "untrusted-chain"),
        (.certificateExpired, 403, false, true, true, "certificate-expired"),
        (.certificateNotYetValid, 403, false, true, true, "certificate-not-yet-valid"),
        (.revoked, 403, false, true, true, "revoked"),
        (.revocationUnknown, 403, true, true, true, "revocation-unknown"),
        (.hostnameMismatch, 403, false, true, true, "hostname-mismatch"),
        (.pinMismatch, 403, true, true, true, "pin-mismatch"),
        (.customCheck, 403, true, true, true, "custom-check"),
        (.tlsVersion, 403, false, false, false, "tls-version"),
        (.destinationDenied, 403, false, false, false, "destination-denied"),
        (.cleartextDenied, 403, false, false, false, "cleartext-denied"),
        (.badRequest, 400, false, false, false, "bad-request"),
        (.noSNI, 403, false, false, false, "no-sni"),
        (.captureLoop, 403, false, false, false, "capture-loop"),
        (.dnsFailure, 502, false, false, false, "dns-failure"),
        (.upstreamUnreachable, 502, false, false, false, "upstream-unreachable"),
        (.handshakeFailed, 502, false, false, false, "handshake-failed"),
        (.upstreamTimeout, 504, false, false, false, "upstream-timeout"),
    ]

    func testEveryReasonsRow() {
        XCTAssertEqual(Self.expected.map(\.0), RefusalReason.allCases, "every reason, in priority order")
        for (reason, status, reportOnly, policy, certificate, label) in Self.expected {
            let traits = reason.traits
            XCTAssertEqual(traits.httpStatus, status, "\(reason)")
            XCTAssertEqual(traits.mayBeReportOnly, reportOnly, "\(reason)")
            XCTAssertEqual(traits.isPolicyDecision, policy, "\(reason)")
            XCTAssertEqual(traits.isCertificateReason, certificate, "\(reason)")
            XCTAssertEqual(traits.metricLabel, label, "\(reason)")
        }
    }

    /// The priority order is declaration order, and total.
    func testPriorityIsDeclarationOrder() {
        XCTAssertEqual(RefusalReason.allCases.shuffled().sorted(), RefusalReason.allCases)
        for reason in RefusalReason.allCases { XCTAssertFalse(reason < reason, "\(reason)") }
    }
}
