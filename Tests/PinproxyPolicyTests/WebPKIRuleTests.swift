import Foundation
import PinproxyInterop
import PinproxyPolicy
import XCTest

/// The web-PKI rules pinproxy applies beyond OpenSSL (`Sources/PinproxyPolicy/WebPKI`): each
/// rule fires on a certificate that breaks it and names itself in the detail, and each applies
/// only under the trust modes docs/trust-decisions.md lists.
final class WebPKIRuleTests: XCTestCase {
    /// For each rule, x509-limbo testcases that break it (and that OpenSSL alone accepts), with
    /// the reason its failure carries.
    static let limboViolations: [String: (RefusalReason, [String])] = [
        "serial-number": (.untrustedChain, ["rfc5280::serial::negative", "rfc5280::serial::zero", "rfc5280::serial::too-long"]),
        "public-key": (.untrustedChain, ["webpki::forbidden-dsa-leaf", "webpki::forbidden-dsa-root",
                                         "webpki::forbidden-rsa-key-not-divisible-by-8-in-leaf",
                                         "webpki::forbidden-rsa-not-divisible-by-8-in-root"]),
        "extensions-decode": (.untrustedChain, ["webpki::malformed-aia"]),
        "key-cert-sign-needs-ca": (.untrustedChain, ["rfc5280::leaf-ku-keycertsign"]),
        "name-constraints-only-in-ca": (.untrustedChain, ["rfc5280::nc::not-allowed-in-ee-critical",
                                                          "rfc5280::nc::not-allowed-in-ee-noncritical"]),
        "name-constraints-well-formed": (.untrustedChain, ["rfc5280::nc::invalid-dnsname-leading-period",
                                                           "webpki::nc::intermediate-permitted-excluded-subtrees-both-empty-sequences",
                                                           "webpki::nc::intermediate-permitted-excluded-subtrees-both-null"]),
        "policy-constraints-critical": (.untrustedChain, ["rfc5280::pc::ica-noncritical-pc"]),
        "anchor-basic-constraints": (.untrustedChain, ["rfc5280::root-missing-basic-constraints",
                                                       "rfc5280::root-non-critical-basic-constraints"]),
        "ca-subject": (.untrustedChain, ["rfc5280::ca-empty-subject"]),
        "san-critical-with-empty-subject": (.untrustedChain, ["rfc5280::san::noncritical-with-empty-subject"]),
        "leaf-dns-names": (.hostnameMismatch, ["rfc5280::nc::nc-permits-invalid-dns-san"]),
        "crl-number": (.revocationUnknown, ["crl::crlnumber-missing"]),
        "leaf-extended-key-usage": (.untrustedChain, ["webpki::eku::ee-without-eku", "webpki::eku::ee-anyeku",
                                                      "webpki::eku::ee-critical-eku"]),
        "leaf-not-ca": (.untrustedChain, ["webpki::ee-basicconstraints-ca"]),
        "leaf-common-name-in-san": (.hostnameMismatch, ["webpki::cn::case-mismatch", "webpki::cn::ipv4-hex-mismatch",
                                                        "webpki::cn::ipv4-leading-zeros-mismatch", "webpki::cn::ipv6-non-rfc5952-mismatch",
                                                        "webpki::cn::ipv6-uncompressed-mismatch", "webpki::cn::ipv6-uppercase-mismatch",
                                                        "webpki::cn::not-in-san", "webpki::cn::punycode-not-in-san",
                                                        "webpki::cn::utf8-vs-punycode-mismatch"]),
        "san-not-critical-with-subject": (.untrustedChain, ["webpki::san::san-critical-with-nonempty-subject"]),
        "authority-key-identifier": (.untrustedChain, ["rfc5280::aki::leaf-missing-aki", "rfc5280::aki::intermediate-missing-aki"]),
        "ca-subject-key-identifier": (.untrustedChain, ["rfc5280::ski::intermediate-missing-ski", "rfc5280::ski::root-missing-ski"]),
        "anchor-authority-key-identifier": (.untrustedChain, ["webpki::aki::root-with-aki-all-fields",
                                                              "webpki::aki::root-with-aki-authoritycertissuer",
                                                              "webpki::aki::root-with-aki-authoritycertserialnumber",
                                                              "webpki::aki::root-with-aki-missing-keyidentifier",
                                                              "webpki::aki::root-with-aki-ski-mismatch"]),
        "anchor-extended-key-usage": (.untrustedChain, ["webpki::eku::root-has-eku"]),
        "wildcard-public-suffix": (.hostnameMismatch, ["webpki::san::public-suffix-multi-label-wildcard-san",
                                                       "webpki::san::public-suffix-private-namespace-wildcard-san"]),
    ]

    /// Each rule refuses the limbo testcases that break it, naming itself with its reason.
    func testEachRuleFiresOnTheLimboTestcasesThatBreakIt() throws {
        let limbo = try JSONDecoder.snakeCase.decode(ConformanceTests.Limbo.self,
                                                    from: Data(contentsOf: ConformanceTests.vectorsFile(.limbo)))
        let testcases = Dictionary(uniqueKeysWithValues: limbo.testcases.map { ($0.id, $0) })
        for (rule, (reason, ids)) in Self.limboViolations {
            for id in ids {
                guard let testcase = testcases[id], let name = testcase.expectedPeerName else {
                    XCTFail("\(id) is not in the vectors")
                    continue
                }
                let outcome = ConformanceTests.evaluate(testcase, name: name, requireWebPKIProfile: true)
                XCTAssertFalse(outcome.allowed, "\(rule): \(id) is allowed")
                XCTAssertTrue(outcome.detail.contains("\(reason.rawValue): rule \(rule): "), "\(rule): \(id): \(outcome.detail)")
            }
        }
    }

    /// The table above covers every rule but ca-basic-constraints, which has its own test.
    func testEveryRuleIsCovered() {
        XCTAssertEqual(Set(WebPKIProfile.ruleNames), Set(Self.limboViolations.keys).union(["ca-basic-constraints"]))
        XCTAssertEqual(WebPKIProfile.ruleNames.count, Set(WebPKIProfile.ruleNames).count, "two rules share a name")
    }

    // MARK: Trust modes, on certificates made for these tests (rule-fixtures.py)

    /// The standard PKI plus this file's certificates, generated once per test process.
    nonisolated(unsafe) static let fixtures: Result<Workspace, any Error> = Result {
        let workspace = try Workspace(try PKI.shared())
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", packageRoot.appendingPathComponent("Tests/PinproxyPolicyTests/rule-fixtures.py").path,
                             workspace.directory]
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw FixtureError(description: "rule-fixtures.py failed") }
        return workspace
    }

    /// Evaluates `chain` (a file of the workspace) for `host` under a `[default]` entry with `entry`'s keys.
    func evaluate(_ entry: String, host: String = "api.test", chain: String, at time: Date = evaluationTime) throws -> Verdict {
        let workspace = try Self.fixtures.get()
        let config = try ConfigLoader.load(text: "[default]\n" + entry, path: workspace.directory + "/pinproxy.toml",
                                           directory: workspace.directory, now: time)
        let target = try XCTUnwrap(TargetHost(host))
        let presented = try Certificate.parseAll(Array(try Data(contentsOf: URL(fileURLWithPath: workspace.directory + "/" + chain))))
        return TrustEvaluator.evaluate(.init(chain: presented), host: target, port: 443, entry: config.policies.lookup(target),
                                       context: config.verdictContext, at: time)
    }

    /// Asserts a refusal with `reason` whose detail names `rule`.
    func assertRefused(_ verdict: Verdict, _ reason: RefusalReason, rule: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(verdict.summary, "refuse: \(reason.rawValue)", "\(verdict.failures)", file: file, line: line)
        XCTAssertTrue(verdict.failures.contains { $0.reason == reason && $0.detail.hasPrefix("rule \(rule): ") },
                      "\(verdict.failures)", file: file, line: line)
    }

    func testIssuanceRulesApplyToListedAnchorsUnlessRelaxed() throws {
        let listed = "trust = [\"rules-root.pem\"]\n"
        XCTAssertEqual(try evaluate(listed, chain: "rules-good.pem").summary, "allow")
        assertRefused(try evaluate(listed, chain: "rules-no-eku.pem"), .untrustedChain, rule: "leaf-extended-key-usage")
        assertRefused(try evaluate(listed, chain: "rules-cn-elsewhere.pem"), .hostnameMismatch, rule: "leaf-common-name-in-san")
        let relaxed = listed + "require_web_pki_profile = false\n"
        XCTAssertEqual(try evaluate(relaxed, chain: "rules-no-eku.pem").summary, "allow")
        XCTAssertEqual(try evaluate(relaxed, chain: "rules-cn-elsewhere.pem").summary, "allow")
    }

    /// Under trust = "pinned" the operator chose the certificates: issuance rules do not apply.
    func testPinnedTrustSkipsIssuanceRules() throws {
        let pinnedRoot = "trust = \"pinned\"\npin = \"certificate\"\ncertificates = [\"rules-root.pem\"]\n"
        XCTAssertEqual(try evaluate(pinnedRoot, chain: "rules-no-eku.pem").summary, "allow")
        XCTAssertEqual(try evaluate(pinnedRoot, chain: "rules-cn-elsewhere.pem").summary, "allow")
        // RFC 5280 rules still do.
        assertRefused(try evaluate(pinnedRoot, chain: "rules-lax-ca.pem"), .untrustedChain, rule: "ca-basic-constraints")
    }

    /// A bare self-signed server (cA = TRUE, no key identifiers, no EKU, a CN that is not its
    /// SAN) keeps working wherever it is the anchor itself, and under trust = "none".
    func testBareSelfSignedServerWorksUnderEveryTrustMode() throws {
        let pinned = "trust = \"pinned\"\npin = \"public-key\"\ncertificates = [\"rules-bare-self.pem\"]\n"
        XCTAssertEqual(try evaluate(pinned, chain: "rules-bare-self.pem").summary, "allow")
        let unverified = "trust = \"none\"\npin = \"public-key\"\ncertificates = [\"rules-bare-self.pem\"]\n"
        XCTAssertEqual(try evaluate(unverified, chain: "rules-bare-self.pem").summary, "allow")
        let listed = "trust = [\"rules-bare-self.pem\"]\n"
        XCTAssertEqual(try evaluate(listed, chain: "rules-bare-self.pem").summary, "allow")
    }

    /// A leaf's pathLenConstraint is ignored: the leaf is not an intermediate (RFC 5280 4.2.1.9).
    /// A CA certificate as the leaf passes where issuance rules are off, and is refused by
    /// leaf-not-ca where they apply.
    func testPathLengthInTheLeafIsIgnored() throws {
        let pinnedRoot = "trust = \"pinned\"\npin = \"certificate\"\ncertificates = [\"rules-root.pem\"]\n"
        XCTAssertEqual(try evaluate(pinnedRoot, chain: "rules-ca-leaf.pem").summary, "allow")
        assertRefused(try evaluate("trust = [\"rules-root.pem\"]\n", chain: "rules-ca-leaf.pem"), .untrustedChain, rule: "leaf-not-ca")
    }

    func testIntermediateWithNonCriticalBasicConstraints() throws {
        assertRefused(try evaluate("trust = [\"rules-root.pem\"]\n", chain: "rules-lax-ca.pem"), .untrustedChain, rule: "ca-basic-constraints")
    }

    /// A wildcard over a public suffix is refused in every trust mode, relaxed or not.
    func testWildcardOverAPublicSuffix() throws {
        for entry in ["trust = [\"rules-root.pem\"]\n", "trust = [\"rules-root.pem\"]\nrequire_web_pki_profile = false\n",
                      "trust = \"none\"\npin = \"public-key\"\ncertificates = [\"rules-public-suffix-wildcard.pem\"]\n"] {
            assertRefused(try evaluate(entry, host: "shop.co.uk", chain: "rules-public-suffix-wildcard.pem"), .hostnameMismatch,
                          rule: "wildcard-public-suffix")
        }
        // A wildcard under a registrable domain is fine.
        XCTAssertEqual(try evaluate("trust = [\"root-a.pem\"]\n", host: "a.wild.test", chain: "wild-chain.pem").summary, "allow")
    }

    /// RFC 5280 4.1.2.5: notAfter is inclusive, to the second (a fractional time inside the
    /// notAfter second is still valid).
    func testNotAfterIsInclusive() throws {
        let listed = "trust = [\"rules-root.pem\"]\n"
        let notAfter = date("2030-01-01T00:00:00Z")
        XCTAssertEqual(try evaluate(listed, chain: "rules-boundary.pem", at: notAfter).summary, "allow")
        XCTAssertEqual(try evaluate(listed, chain: "rules-boundary.pem", at: notAfter + 0.5).summary, "allow")
        XCTAssertEqual(try evaluate(listed, chain: "rules-boundary.pem", at: notAfter + 1).summary, "refuse: certificate-expired")
    }

    func testRequireWebPKIProfileIsABoolean() throws {
        let workspace = try Self.fixtures.get()
        XCTAssertThrowsError(try ConfigLoader.load(text: "[default]\nrequire_web_pki_profile = \"no\"\n",
                                                   path: "p.toml", directory: workspace.directory)) { error in
            let diagnostics = (error as? ConfigError)?.diagnostics ?? []
            XCTAssertEqual(diagnostics.map(\.line), [2], "\(diagnostics)")
        }
    }

    // MARK: The public suffix list

    func testPublicSuffixRules() {
        let list = PublicSuffixList(text: """
            // comment
            uk
            co.uk
            *.ck
            !www.ck
            s3.amazonaws.com
            """)
        XCTAssertTrue(list.isPublicSuffix("co.uk"))
        XCTAssertTrue(list.isPublicSuffix("CO.UK."))
        XCTAssertFalse(list.isPublicSuffix("example.co.uk"))
        XCTAssertTrue(list.isPublicSuffix("anything.ck"))
        XCTAssertFalse(list.isPublicSuffix("www.ck"))
        XCTAssertTrue(list.isPublicSuffix("s3.amazonaws.com"))
        XCTAssertFalse(list.isPublicSuffix("amazonaws.com"))
        XCTAssertTrue(list.isPublicSuffix("localdomain"), "a single label is a public suffix (the implicit * rule)")
    }

    func testSystemPublicSuffixList() throws {
        let list = try PublicSuffixList(contentsOf: PublicSuffixList.systemPath)
        XCTAssertTrue(list.isPublicSuffix("co.uk"))
        XCTAssertTrue(list.isPublicSuffix("s3.amazonaws.com"), "the private section is read too")
        XCTAssertFalse(list.isPublicSuffix("example.com"))
        // 公司.cn, written in Unicode in the list, matched in its xn-- form.
        XCTAssertTrue(list.isPublicSuffix("xn--55qx5d.cn"))
        XCTAssertFalse(list.isPublicSuffix("example.xn--55qx5d.cn"))
    }

    func testMissingPublicSuffixListIsAClearError() {
        XCTAssertThrowsError(try PublicSuffixList(contentsOf: "/nonexistent/public_suffix_list.dat")) { error in
            XCTAssertTrue("\(error)".contains("install Debian's publicsuffix package"), "\(error)")
        }
    }
}
