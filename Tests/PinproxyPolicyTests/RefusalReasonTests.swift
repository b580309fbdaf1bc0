import PinproxyPolicy
import XCTest

/// `RefusalReason.traits`, the one table of what pinproxy does with each reason, row by row:
/// a change to any reason's treatment (or a new reason) changes this test too.
final class RefusalReasonTests: XCTestCase {
    /// reason: HTTP status, may be report-only, policy decision, certificate reason, Proxy-Status error.
    static let expected: [(RefusalReason, Int, Bool, Bool, Bool, String)] = [
        (.clientDenied, 403, false, false, false, "http_request_denied"),
        (.hostDenied, 403, true, true, false, "http_request_denied"),
        (.portDenied, 403, true, true, false, "http_request_denied"),
        (.untrustedChain, 403, false, true, true, "tls_certificate_error"),
        (.certificateExpired, 403, false, true, true, "tls_certificate_error"),
        (.certificateNotYetValid, 403, false, true, true, "tls_certificate_error"),
        (.revoked, 403, false, true, true, "tls_certificate_error"),
        (.revocationUnknown, 403, true, true, true, "tls_certificate_error"),
        (.hostnameMismatch, 403, false, true, true, "tls_certificate_error"),
        (.pinMismatch, 403, true, true, true, "tls_certificate_error"),
        (.ctMissing, 403, true, true, true, "tls_certificate_error"),
        (.customCheck, 403, true, true, true, "tls_certificate_error"),
        (.tlsVersion, 403, false, false, false, "tls_protocol_error"),
        (.destinationDenied, 403, false, false, false, "destination_ip_prohibited"),
        (.destinationMismatch, 403, false, false, false, "destination_ip_prohibited"),
        (.cleartextDenied, 403, false, false, false, "http_request_denied"),
        (.badRequest, 400, false, false, false, "http_request_error"),
        (.noSNI, 403, false, false, false, "http_request_error"),
        (.captureLoop, 403, false, false, false, "proxy_loop_detected"),
        (.dnsFailure, 502, false, false, false, "dns_error"),
        (.upstreamUnreachable, 502, false, false, false, "destination_unavailable"),
        (.handshakeFailed, 502, false, false, false, "tls_protocol_error"),
        (.upstreamTimeout, 504, false, false, false, "connection_timeout"),
    ]

    func testEveryReasonsRow() {
        XCTAssertEqual(Self.expected.map(\.0), RefusalReason.allCases, "every reason, in priority order")
        for (reason, status, reportOnly, policy, certificate, proxyError) in Self.expected {
            let traits = reason.traits
            XCTAssertEqual(traits.httpStatus, status, "\(reason)")
            XCTAssertEqual(traits.mayBeReportOnly, reportOnly, "\(reason)")
            XCTAssertEqual(traits.isPolicyDecision, policy, "\(reason)")
            XCTAssertEqual(traits.isCertificateReason, certificate, "\(reason)")
            XCTAssertEqual(traits.proxyStatusError.rawValue, proxyError, "\(reason)")
        }
    }

    /// The priority order is declaration order, and total.
    func testPriorityIsDeclarationOrder() {
        XCTAssertEqual(RefusalReason.allCases.shuffled().sorted(), RefusalReason.allCases)
        for reason in RefusalReason.allCases { XCTAssertFalse(reason < reason, "\(reason)") }
    }
}
