import COpenSSL
import Foundation
@testable import PinproxyInterop
@testable import PinproxyPolicy
import XCTest

/// The verify callback `TrustStore.verify` gives X509_verify_cert: under `ChainRules` it may
/// accept one OpenSSL error, an expiry within the notAfter second (RFC 5280's inclusive
/// notAfter); every other answer only narrows OpenSSL's.
final class VerifyCallbackTests: XCTestCase {
    /// `rules-boundary.pem`'s leaf, whose notAfter is 2030-01-01T00:00:00Z.
    private var leaf: Certificate!
    private let notAfter = date("2030-01-01T00:00:00Z")

    override func setUpWithError() throws {
        let workspace = try WebPKIRuleTests.fixtures.get()
        leaf = try XCTUnwrap(Certificate.parseAll(Array(try Data(contentsOf: URL(fileURLWithPath: workspace.directory + "/rules-boundary.pem")))).first)
        XCTAssertEqual(leaf.notAfter, notAfter)
    }

    /// The callback's collector under pinproxy's rules, validating at `second`.
    private func collector(at second: Date) -> ProblemCollector {
        ProblemCollector { ChainRules.acceptsExpiry($0, of: $1, validationSecond: second) }
    }

    /// Without its context (or the collector in it) the callback can record nothing: it refuses.
    func testMissingContextRefuses() {
        XCTAssertEqual(TrustStore.verifyCallback(0, nil), 0)
        XCTAssertEqual(TrustStore.verifyCallback(1, nil), 0)
    }

    func testExpiryWithinTheNotAfterSecondIsTheOnlyErrorAccepted() {
        let atNotAfter = collector(at: notAfter)
        XCTAssertEqual(atNotAfter.review(ok: 0, code: X509_V_ERR_CERT_HAS_EXPIRED, depth: 0, certificate: leaf), 1)
        XCTAssertEqual(atNotAfter.problems, [])

        let afterwards = collector(at: notAfter + 1)
        XCTAssertEqual(afterwards.review(ok: 0, code: X509_V_ERR_CERT_HAS_EXPIRED, depth: 0, certificate: leaf), 1)
        XCTAssertEqual(afterwards.problems.map(\.kind), [.expired])

        let unnamed = collector(at: notAfter)
        _ = unnamed.review(ok: 0, code: X509_V_ERR_CERT_HAS_EXPIRED, depth: 0, certificate: nil)
        XCTAssertEqual(unnamed.problems.map(\.kind), [.expired], "an expiry about no certificate is not accepted")
    }

    /// Every other error code, X509_V_OK included, is recorded (so the chain is not verified),
    /// even about a certificate inside its validity.
    func testOtherErrorsAreNeverOverridden() {
        let collector = collector(at: notAfter)
        let codes = (Int32(0)...Int32(200)).filter { $0 != X509_V_ERR_CERT_HAS_EXPIRED }
        for code in codes {
            XCTAssertEqual(collector.review(ok: 0, code: code, depth: 1, certificate: leaf), 1, "code \(code): go on to the next problem")
        }
        XCTAssertEqual(collector.problems.map(\.code), codes)
        XCTAssertFalse(ChainVerification(chain: [leaf], problems: collector.problems).isVerified)
    }

    /// What OpenSSL accepts stays accepted, and records nothing.
    func testAcceptedStepsPassThrough() {
        let collector = collector(at: notAfter)
        XCTAssertEqual(collector.review(ok: 1, code: X509_V_OK, depth: 0, certificate: leaf), 1)
        XCTAssertEqual(collector.problems, [])
    }

    /// The accepted expiry masks nothing else: the same leaf at its notAfter second under an
    /// anchor that did not issue it is untrusted.
    func testAcceptedExpiryLeavesOtherProblems() throws {
        let workspace = try WebPKIRuleTests.fixtures.get()
        let chain = try Certificate.parseAll(Array(try Data(contentsOf: URL(fileURLWithPath: workspace.directory + "/rules-boundary.pem"))))
        let trusted = try TrustStore(anchors: [try PKI.shared().certificate("root-a.pem")])
        let result = trusted.verify(leaf: chain[0], intermediates: Array(chain.dropFirst()), at: notAfter)
        XCTAssertFalse(result.isVerified)
        XCTAssertEqual(Set(result.problems.map(\.kind)), [.untrusted], "\(result.problems)")
        let own = try TrustStore(anchors: [Certificate.parseAll(Array(try Data(contentsOf: URL(fileURLWithPath: workspace.directory + "/rules-root.pem"))))[0]])
        XCTAssertTrue(own.verify(leaf: chain[0], intermediates: Array(chain.dropFirst()), at: notAfter).isVerified)
    }
}
