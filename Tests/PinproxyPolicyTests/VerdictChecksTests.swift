import Foundation
import PinproxyInterop
@testable import PinproxyPolicy
import XCTest

/// `Verdict.checks`: the verdict's account of each check it made, with its result and the
/// reason of each failure, in order. The web-PKI rules are listed one by one; the cases below
/// name the rules that fail and expect every other to share one status.
final class VerdictChecksTests: XCTestCase {
    var pki: PKI!

    override func setUpWithError() throws {
        pki = try PKI.shared()
    }

    static func entry(_ extra: String = "") -> String {
        "[hosts.\"api.test\"]\ntrust = [\"root-a.pem\"]\n\(extra)"
    }

    static let twoPins = #"pin = "public-key""# + "\n" + #"pins = ["{spki:int-a}", "{spki:api-newkey}"]"#
    static let wrongPins = #"pin = "public-key""# + "\n" + #"pins = ["{spki:root-b}", "{spki:api-newkey}"]"#

    /// Each check other than the rules as `check: status [reasons]`.
    func listed(_ verdict: Verdict) -> [String] {
        verdict.checks.compactMap { result in
            if case .rule = result.check { return nil }
            return line(result)
        }
    }

    func line(_ result: CheckResult) -> String {
        "\(result.check): \(result.status.rawValue)" + (result.failures.isEmpty ? "" : " " + result.failures.map(\.reason.rawValue).joined(separator: ","))
    }

    /// Asserts that the rules run between the chain and revocation, that `failing` (rule name →
    /// reasons) are the failed ones, and that every other rule has `others`.
    func assertRules(_ verdict: Verdict, others: CheckResult.Status, failing: [String: String] = [:],
                     file: StaticString = #filePath, line: UInt = #line) {
        let checks = verdict.checks.map(\.check)
        guard let chain = checks.firstIndex(of: .chain), let revocation = checks.firstIndex(of: .revocation) else {
            return XCTFail("no chain or revocation check: \(verdict.checks)", file: file, line: line)
        }
        let rules = verdict.checks[(chain + 1)..<revocation]
        XCTAssertFalse(rules.isEmpty, file: file, line: line)
        var failed: [String: String] = [:]
        for result in rules {
            guard case .rule(let name) = result.check else { return XCTFail("\(result) among the rules", file: file, line: line) }
            if result.status == .failed {
                failed[name] = result.failures.map(\.reason.rawValue).joined(separator: ",")
                XCTAssertTrue(result.failures.allSatisfy { $0.detail.hasPrefix("rule \(name): ") }, "\(result)", file: file, line: line)
            } else {
                XCTAssertEqual(result.status, others, "\(result)", file: file, line: line)
            }
        }
        XCTAssertEqual(failed, failing, file: file, line: line)
    }

    func testAllowed() throws {
        let verdict = try pki.evaluate(config: Self.entry(Self.twoPins), host: "api.test", chain: "api-chain.pem")
        XCTAssertEqual(verdict.summary, "allow")
        XCTAssertEqual(listed(verdict), ["action: passed", "ports: passed", "chain: passed", "revocation: not checked",
                                         "host name: passed", "pins: passed", "custom check: not checked"])
        assertRules(verdict, others: .passed)
    }

    func testPinMismatch() throws {
        let verdict = try pki.evaluate(config: Self.entry(Self.wrongPins), host: "api.test", chain: "api-chain.pem")
        XCTAssertEqual(verdict.summary, "refuse: pin-mismatch")
        XCTAssertEqual(listed(verdict), ["action: passed", "ports: passed", "chain: passed", "revocation: not checked",
                                         "host name: passed", "pins: failed pin-mismatch", "custom check: not checked"])
        assertRules(verdict, others: .passed)
        XCTAssertEqual(verdict.checks.first { $0.check == .pins }?.failures.map(\.description),
                       ["pin-mismatch: none of the 2 public-key pin(s) matches the verified chain"])
    }

    func testExpiredLeafLeavesTheRulesUnreached() throws {
        let verdict = try pki.evaluate(config: Self.entry(), host: "api.test", chain: "expired-chain.pem")
        XCTAssertEqual(verdict.summary, "refuse: certificate-expired")
        XCTAssertEqual(listed(verdict), ["action: passed", "ports: passed", "chain: failed certificate-expired", "revocation: not checked",
                                         "host name: passed", "pins: not checked", "custom check: not checked"])
        assertRules(verdict, others: .notReached)
    }

    func testWebPKIRuleFailure() throws {
        let verdict = try pki.evaluate(config: Self.entry(), host: "api.test", chain: "cn-only-chain.pem")
        XCTAssertEqual(verdict.summary, "refuse: hostname-mismatch")
        XCTAssertEqual(listed(verdict), ["action: passed", "ports: passed", "chain: passed", "revocation: not checked",
                                         "host name: failed hostname-mismatch", "pins: not checked", "custom check: not checked"])
        assertRules(verdict, others: .passed, failing: ["leaf-common-name-in-san": "hostname-mismatch"])
    }

    func testAfterAnUntrustedChainTheRulesAreNotReached() throws {
        let verdict = try pki.evaluate(config: Self.entry(Self.twoPins), host: "api.test", chain: "untrusted-chain.pem")
        XCTAssertEqual(verdict.summary, "refuse: untrusted-chain")
        XCTAssertEqual(listed(verdict), ["action: passed", "ports: passed", "chain: failed untrusted-chain", "revocation: not checked",
                                         "host name: passed", "pins: failed pin-mismatch", "custom check: not checked"])
        assertRules(verdict, others: .notReached)
    }

    func testARevokedLeafFailsRevocationNotTheChain() throws {
        let verdict = try pki.evaluate(config: Self.entry("revocation = \"crl\"\ncrls = [\"crl-int-a.pem\"]"), host: "api.test",
                                       chain: "revoked-chain.pem")
        XCTAssertEqual(verdict.summary, "refuse: revoked")
        XCTAssertEqual(listed(verdict), ["action: passed", "ports: passed", "chain: passed", "revocation: failed revoked",
                                         "host name: passed", "pins: not checked", "custom check: not checked"])
        assertRules(verdict, others: .notReached)
    }

    /// An enforced denial ends the evaluation: nothing after it is reached.
    func testADeniedHostReachesNoOtherCheck() throws {
        let verdict = try pki.evaluate(config: Self.entry("action = \"deny\"\n" + Self.twoPins), host: "api.test", chain: "api-chain.pem")
        XCTAssertEqual(verdict.summary, "refuse: host-denied")
        XCTAssertEqual(listed(verdict), ["action: failed host-denied", "ports: passed", "chain: not reached", "revocation: not checked",
                                         "host name: not reached", "pins: not reached", "custom check: not checked"])
        assertRules(verdict, others: .notReached)
    }

    func testAllowInsecureChecksNothing() throws {
        let verdict = try pki.evaluate(config: "[hosts.\"api.test\"]\naction = \"allow-insecure\"\n", host: "api.test", chain: "expired-selfsigned.pem")
        XCTAssertEqual(verdict.summary, "allow")
        XCTAssertEqual(listed(verdict), ["action: passed", "ports: passed", "chain: not checked", "revocation: not checked",
                                         "host name: not checked", "pins: not checked", "custom check: not checked"])
    }

    /// The custom check is pending until its answer is added; the failures are the checks'.
    func testTheCustomCheckIsAddedToTheList() throws {
        let verdict = try pki.evaluate(config: Self.entry("verify_command = [\"/bin/true\"]"), host: "api.test", chain: "api-chain.pem")
        XCTAssertEqual(verdict.checks.last.map(line), "custom check: not reached")
        let refused = TrustEvaluator.adding(CustomCheckResult(passed: false, detail: "no SCT"), to: verdict)
        XCTAssertEqual(refused.checks.last.map(line), "custom check: failed custom-check")
        XCTAssertEqual(refused.failures, refused.checks.flatMap(\.failures))
        let passed = TrustEvaluator.adding(CustomCheckResult(passed: true, detail: ""), to: verdict)
        XCTAssertEqual(passed.checks.last.map(line), "custom check: passed")
        XCTAssertEqual(passed.outcome, .allow)
    }

    /// Each load (a start or a reload) brings its own public suffix list and chain memory.
    func testEachLoadHasItsOwnContext() throws {
        let first = try pki.loadConfig(Self.entry())
        let second = try pki.loadConfig(Self.entry())
        XCTAssertFalse(first.verdictContext === second.verdictContext)
        XCTAssertFalse(first.verdictContext.verifiedChains === second.verdictContext.verifiedChains)
        XCTAssertTrue(first.verdictContext.publicSuffixes.isPublicSuffix("co.uk"))
    }

    /// The verdict reads the list it is handed, not one of its own: under a list that makes
    /// `wild.test` a public suffix, the leaf's `*.wild.test` is refused; under the system list not.
    func testTheVerdictUsesTheListItIsGiven() throws {
        let loaded = try pki.loadConfig("[default]\ntrust = [\"root-a.pem\"]\n")
        let host = TargetHost("a.wild.test")!
        let chain = TrustEvaluator.Presentation(chain: try pki.certificates("wild-chain.pem"))
        func verdict(_ list: PublicSuffixList) -> Verdict {
            TrustEvaluator.evaluate(chain, host: host, port: 443, entry: loaded.policies.lookup(host),
                                    context: VerdictContext(publicSuffixes: list), at: evaluationTime)
        }
        XCTAssertEqual(verdict(loaded.verdictContext.publicSuffixes).summary, "allow")
        let refused = verdict(PublicSuffixList(text: "wild.test\n"))
        XCTAssertEqual(refused.summary, "refuse: hostname-mismatch")
        XCTAssertEqual(refused.checks.first { $0.check == .rule("wildcard-public-suffix") }.map(line),
                       "rule wildcard-public-suffix: failed hostname-mismatch")
    }
}
