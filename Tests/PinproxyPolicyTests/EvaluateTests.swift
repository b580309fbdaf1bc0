import Foundation
import PinproxyInterop
import PinproxyPolicy
import XCTest

/// One row of a verdict table: a config, a connection and the summary line `pinproxy evaluate`
/// must print for it, word for word (smokescreen `acl_test.go` style).
struct EvaluationCase {
    let name: String
    /// A whole config; `{spki:STEM}` and `{cert:STEM}` stand for the pins of this run's PKI.
    let config: String
    let host: String
    var port: UInt16 = 443
    /// A file of the standard PKI, leaf first.
    let chain: String
    /// A DER OCSP response file standing in for the server's staple.
    var staple: String? = nil
    var at: Date = evaluationTime
    /// `allow`, `refuse: REASON` or `allow (would refuse: REASON)`.
    let expect: String
    /// When given, every failure the verdict must keep, most important first.
    var failures: [RefusalReason]? = nil
}

/// The trust decision, `TrustEvaluator.evaluate`, through the library API: configs loaded by
/// `ConfigLoader`, entries looked up in the `PolicyTable`, chains from the standard test PKI.
/// Every refusal has an allowing twin that differs in one input, so that a test fails both when a
/// check is removed and when it refuses everything.
final class EvaluateTests: XCTestCase {
    var pki: PKI!

    override func setUpWithError() throws {
        pki = try PKI.shared()
    }

    /// Runs every row and reports each mismatch with its row's name.
    func check(_ cases: [EvaluationCase], file: StaticString = #filePath, line: UInt = #line) {
        for row in cases {
            do {
                let verdict = try pki.evaluate(config: row.config, host: row.host, port: row.port, chain: row.chain,
                                               staple: row.staple, at: row.at)
                XCTAssertEqual(verdict.summary, row.expect, "\(row.name): \(verdict.failures)", file: file, line: line)
                if let failures = row.failures {
                    XCTAssertEqual(verdict.failures.map(\.reason), failures, "\(row.name): \(verdict.failures)", file: file, line: line)
                }
                // The summary and the outcome agree, and only a refusal blocks.
                XCTAssertEqual(verdict.allowsConnection, !row.expect.hasPrefix("refuse"), row.name, file: file, line: line)
            } catch {
                XCTFail("\(row.name): \(error)", file: file, line: line)
            }
        }
    }

    /// An entry for api.test trusting root A alone, with `extra` keys.
    static func apiEntry(_ extra: String = "") -> String {
        """
        [hosts."api.test"]
        trust = ["root-a.pem"]
        \(extra)
        """
    }

    // MARK: Every reason, each with an allowing twin

    func testEveryReasonTheVerdictGives() {
        check([
            .init(name: "baseline: a valid chain to a listed root", config: Self.apiEntry(), host: "api.test",
                  chain: "api-chain.pem", expect: "allow", failures: []),
            .init(name: "action deny", config: Self.apiEntry("action = \"deny\""), host: "api.test",
                  chain: "api-chain.pem", expect: "refuse: host-denied", failures: [.hostDenied]),
            .init(name: "deny in [default] covers unlisted hosts", config: "[default]\naction = \"deny\"\n" + Self.apiEntry(),
                  host: "other.test", chain: "other-chain.pem", expect: "refuse: host-denied"),
            .init(name: "port outside the entry's ports", config: Self.apiEntry("ports = [443]"), host: "api.test", port: 8443,
                  chain: "api-chain.pem", expect: "refuse: port-denied", failures: [.portDenied]),
            .init(name: "port inside the entry's ports", config: Self.apiEntry("ports = [443, 8443]"), host: "api.test", port: 8443,
                  chain: "api-chain.pem", expect: "allow"),
            .init(name: "port outside proxy.allow_ports (entry without ports)",
                  config: "[proxy]\nallow_ports = [443]\n" + Self.apiEntry(), host: "api.test", port: 444,
                  chain: "api-chain.pem", expect: "refuse: port-denied"),
            .init(name: "port inside proxy.allow_ports", config: "[proxy]\nallow_ports = [443, 444]\n" + Self.apiEntry(),
                  host: "api.test", port: 444, chain: "api-chain.pem", expect: "allow"),
            .init(name: "chain to another root", config: Self.apiEntry(), host: "api.test",
                  chain: "untrusted-chain.pem", expect: "refuse: untrusted-chain", failures: [.untrustedChain]),
            .init(name: "chain to that other root when it is listed",
                  config: "[hosts.\"api.test\"]\ntrust = [\"root-b.pem\"]\n", host: "api.test",
                  chain: "untrusted-chain.pem", expect: "allow"),
            .init(name: "expired leaf", config: Self.apiEntry(), host: "api.test",
                  chain: "expired-chain.pem", expect: "refuse: certificate-expired", failures: [.certificateExpired]),
            .init(name: "leaf not yet valid", config: Self.apiEntry(), host: "api.test",
                  chain: "notyet-chain.pem", expect: "refuse: certificate-not-yet-valid", failures: [.certificateNotYetValid]),
            .init(name: "leaf revoked by its issuer's CRL",
                  config: Self.apiEntry("revocation = \"crl\"\ncrls = [\"crl-int-a.pem\"]"), host: "api.test",
                  chain: "revoked-chain.pem", expect: "refuse: revoked", failures: [.revoked]),
            .init(name: "revoked leaf without revocation checking", config: Self.apiEntry(), host: "api.test",
                  chain: "revoked-chain.pem", expect: "allow"),
            .init(name: "CRL out of date", config: Self.apiEntry("revocation = \"crl\"\ncrls = [\"crl-int-a-stale.pem\"]"),
                  host: "api.test", chain: "api-chain.pem", expect: "refuse: revocation-unknown", failures: [.revocationUnknown]),
            .init(name: "host not in the leaf's SAN", config: "[default]\ntrust = [\"root-a.pem\"]\n", host: "other.test",
                  chain: "api-chain.pem", expect: "refuse: hostname-mismatch", failures: [.hostnameMismatch]),
            .init(name: "host in the leaf's SAN", config: "[default]\ntrust = [\"root-a.pem\"]\n", host: "other.test",
                  chain: "other-chain.pem", expect: "allow"),
            .init(name: "no pin matches", config: Self.apiEntry("pin = \"public-key\"\npins = [\"{spki:api-newkey}\", \"{spki:other}\"]"),
                  host: "api.test", chain: "api-chain.pem", expect: "refuse: pin-mismatch", failures: [.pinMismatch]),
            .init(name: "the leaf's key is pinned", config: Self.apiEntry("pin = \"public-key\"\npins = [\"{spki:api}\", \"{spki:other}\"]"),
                  host: "api.test", chain: "api-chain.pem", expect: "allow", failures: []),
        ])
    }

    /// The reasons the verdict gives are exactly the policy reasons, in priority order.
    func testPolicyReasonsAndTheirPriority() {
        let policy: [RefusalReason] = [.hostDenied, .portDenied, .untrustedChain, .certificateExpired, .certificateNotYetValid,
                                       .revoked, .revocationUnknown, .hostnameMismatch, .pinMismatch, .ctMissing, .customCheck]
        XCTAssertEqual(RefusalReason.allCases.filter(\.traits.isPolicyDecision), policy)
        XCTAssertEqual(policy.sorted(), policy)
        XCTAssertEqual(policy.map(\.rawValue), ["host-denied", "port-denied", "untrusted-chain", "certificate-expired",
                                                "certificate-not-yet-valid", "revoked", "revocation-unknown",
                                                "hostname-mismatch", "pin-mismatch", "ct-missing", "custom-check"])
    }

    // MARK: Chains that must not verify

    func testChainsThatMustNotVerify() {
        check([
            .init(name: "leaf without its intermediate", config: Self.apiEntry(), host: "api.test",
                  chain: "api.pem", expect: "refuse: untrusted-chain"),
            .init(name: "the same leaf with the intermediate an anchor", config: "[hosts.\"api.test\"]\ntrust = [\"int-a.pem\"]\n",
                  host: "api.test", chain: "api.pem", expect: "allow"),
            .init(name: "pathlen 0 intermediate above another CA", config: Self.apiEntry(), host: "api.test",
                  chain: "deep-chain.pem", expect: "refuse: untrusted-chain", failures: [.untrustedChain]),
            .init(name: "leaf for clientAuth only", config: Self.apiEntry(), host: "api.test",
                  chain: "client-only-chain.pem", expect: "refuse: untrusted-chain", failures: [.untrustedChain]),
            .init(name: "self-signed leaf under a listed root", config: "[default]\ntrust = [\"root-a.pem\"]\n", host: "self.test",
                  chain: "self.pem", expect: "refuse: untrusted-chain"),
            .init(name: "system trust does not know the test roots", config: "[hosts.\"api.test\"]\ntrust = \"system\"\n",
                  host: "api.test", chain: "api-chain.pem", expect: "refuse: untrusted-chain"),
        ])
    }

    /// A server that presents no certificate is refused as untrusted-chain, whatever the entry.
    func testEmptyChain() throws {
        let config = try pki.loadConfig(Self.apiEntry())
        let host = TargetHost("api.test")!
        let verdict = TrustEvaluator.evaluate(.init(chain: []), host: host, port: 443, entry: config.policies.lookup(host),
                                              context: config.verdictContext, at: evaluationTime)
        XCTAssertEqual(verdict.summary, "refuse: untrusted-chain")
        XCTAssertEqual(verdict.failures.map(\.description), ["untrusted-chain: the server presented no certificate"])
    }

    /// A DER leaf is read like a PEM one.
    func testDERLeafWithAnIntermediateAnchor() {
        check([
            .init(name: "DER leaf, intermediate as anchor", config: "[hosts.\"api.test\"]\ntrust = [\"int-a.pem\"]\n",
                  host: "api.test", chain: "api.der", expect: "allow"),
        ])
    }

    // MARK: Trust modes

    func testEveryTrustModeAllows() {
        check([
            .init(name: "list: a root file", config: Self.apiEntry(), host: "api.test", chain: "api-chain.pem", expect: "allow"),
            .init(name: "list: a directory", config: "[hosts.\"api.test\"]\ntrust = [\"anchors/\"]\n", host: "api.test",
                  chain: "api-chain.pem", expect: "allow"),
            .init(name: "list: a directory with .crt and .DER (RSA root B)", config: "[hosts.\"api.test\"]\ntrust = [\"anchors-mixed\"]\n",
                  host: "api.test", chain: "untrusted-chain.pem", expect: "allow"),
            .init(name: "list: the full chain presented, root included", config: Self.apiEntry(), host: "api.test",
                  chain: "api-fullchain.pem", expect: "allow"),
            .init(name: "pinned: a self-signed leaf, certificate pin",
                  config: "[hosts.\"self.test\"]\ntrust = \"pinned\"\npin = \"certificate\"\ncertificates = [\"self.pem\"]\n",
                  host: "self.test", chain: "self.pem", expect: "allow", failures: []),
            .init(name: "pinned: a self-signed leaf, public-key pin",
                  config: "[hosts.\"self.test\"]\ntrust = \"pinned\"\npin = \"public-key\"\ncertificates = [\"self.pem\"]\n",
                  host: "self.test", chain: "self.pem", expect: "allow"),
            .init(name: "pinned: an intermediate is the anchor",
                  config: "[hosts.\"api.test\"]\ntrust = \"pinned\"\npin = \"certificate\"\ncertificates = [\"int-a.pem\"]\n",
                  host: "api.test", chain: "api-chain.pem", expect: "allow"),
            .init(name: "none: the leaf's key pinned",
                  config: "[hosts.\"api.test\"]\ntrust = \"none\"\npin = \"public-key\"\npins = [\"{spki:api}\", \"{spki:api-newkey}\"]\n",
                  host: "api.test", chain: "api-chain.pem", expect: "allow"),
            .init(name: "none: a self-signed leaf's certificate pinned",
                  config: "[hosts.\"self.test\"]\ntrust = \"none\"\npin = \"certificate\"\ncertificates = [\"self.pem\"]\n",
                  host: "self.test", chain: "self.pem", expect: "allow"),
        ])
    }

    func testPinnedTrustRefusesWhatItDoesNotAnchor() {
        let selfPinned = "[hosts.\"self.test\"]\ntrust = \"pinned\"\npin = \"certificate\"\ncertificates = [\"self.pem\"]\n"
        check([
            // Same key, same names, another certificate: not the anchor, and OpenSSL must not take
            // the pinned certificate as its issuer.
            .init(name: "pinned self-signed: a re-issued certificate with the same key", config: selfPinned,
                  host: "self.test", chain: "self-rekeyed.pem", expect: "refuse: untrusted-chain",
                  failures: [.untrustedChain, .pinMismatch]),
            .init(name: "pinned self-signed: even with a public-key pin",
                  config: "[hosts.\"self.test\"]\ntrust = \"pinned\"\npin = \"public-key\"\ncertificates = [\"self.pem\"]\n",
                  host: "self.test", chain: "self-rekeyed.pem", expect: "refuse: untrusted-chain"),
            .init(name: "pinned self-signed: a chain from a CA", config: selfPinned,
                  host: "self.test", chain: "api-chain.pem", expect: "refuse: untrusted-chain"),
            .init(name: "pinned intermediate: a chain through another intermediate",
                  config: "[hosts.\"api.test\"]\ntrust = \"pinned\"\npin = \"certificate\"\ncertificates = [\"int-a.pem\"]\n",
                  host: "api.test", chain: "untrusted-chain.pem", expect: "refuse: untrusted-chain"),
            .init(name: "pinned leaf: a rotated leaf is not the anchor even with its key pinned",
                  config: "[hosts.\"api.test\"]\ntrust = \"pinned\"\npin = \"public-key\"\ncertificates = [\"api.pem\"]\n",
                  host: "api.test", chain: "api-rotated-chain.pem", expect: "refuse: untrusted-chain"),
            .init(name: "pinned leaf: the pinned leaf itself",
                  config: "[hosts.\"api.test\"]\ntrust = \"pinned\"\npin = \"public-key\"\ncertificates = [\"api.pem\"]\n",
                  host: "api.test", chain: "api-chain.pem", expect: "allow"),
        ])
    }

    /// Under trust = "none" only the leaf may match a pin: a pinned intermediate proves nothing
    /// about a chain that was never verified.
    func testTrustNoneMatchesTheLeafOnly() throws {
        let intermediatePinned = "[hosts.\"api.test\"]\ntrust = \"none\"\npin = \"public-key\"\npins = [\"{spki:int-a}\", \"{spki:root-a}\"]\n"
        check([
            .init(name: "none: pinning the intermediate", config: intermediatePinned, host: "api.test",
                  chain: "api-chain.pem", expect: "refuse: pin-mismatch", failures: [.pinMismatch]),
            .init(name: "none: pinning the root, full chain presented", config: intermediatePinned.replacingOccurrences(of: "int-a", with: "root-a"),
                  host: "api.test", chain: "api-fullchain.pem", expect: "refuse: pin-mismatch"),
            .init(name: "list: the same pins on a verified chain", config: intermediatePinned.replacingOccurrences(of: "\"none\"", with: "[\"root-a.pem\"]"),
                  host: "api.test", chain: "api-chain.pem", expect: "allow"),
            .init(name: "none: the host is still validated",
                  config: "[hosts.\"other.test\"]\ntrust = \"none\"\npin = \"public-key\"\npins = [\"{spki:api}\", \"{spki:api-newkey}\"]\n",
                  host: "other.test", chain: "api-chain.pem", expect: "refuse: hostname-mismatch"),
        ])
        let verdict = try pki.evaluate(config: intermediatePinned, host: "api.test", chain: "api-chain.pem")
        XCTAssertEqual(verdict.verified.count, 1, "only the leaf counts as verified under trust none")
        XCTAssertEqual(verdict.failures.map(\.description), ["pin-mismatch: none of the 2 public-key pin(s) matches the leaf"])
    }

    /// The mixed chain presents intermediate A, but the leaf is issued by intermediate B: a pin on
    /// A must not match, because pins are checked against the verified chain, not the presented one.
    func testPinsMatchTheVerifiedChainNotThePresentedOne() throws {
        let config = "[hosts.\"api.test\"]\ntrust = [\"root-a.pem\", \"root-b.pem\"]\npin = \"public-key\"\npins = [\"{spki:int-a}\", \"{spki:root-a}\"]\n"
        check([
            .init(name: "mixed chain with intermediate B: verifies to root B, pin on A", config: config, host: "api.test",
                  chain: "mixed-chain-full.pem", expect: "refuse: pin-mismatch", failures: [.pinMismatch]),
            .init(name: "mixed chain without intermediate B: no path at all", config: config, host: "api.test",
                  chain: "mixed-chain.pem", expect: "refuse: untrusted-chain", failures: [.untrustedChain, .pinMismatch]),
            .init(name: "the genuine chain through A", config: config, host: "api.test",
                  chain: "api-chain.pem", expect: "allow"),
        ])
        let verdict = try pki.evaluate(config: config, host: "api.test", chain: "mixed-chain-full.pem")
        XCTAssertEqual(verdict.verified.map(\.subject), try ["untrusted.pem", "int-b.pem", "root-b.pem"].map { try pki.certificate($0).subject })
    }

    // MARK: Pins

    func testPublicKeyAndCertificatePins() {
        let keyPin = Self.apiEntry("pin = \"public-key\"\npins = [\"{spki:api}\", \"{spki:other}\"]")
        let certPin = Self.apiEntry("pin = \"certificate\"\npins = [\"{cert:api}\", \"{cert:other}\"]")
        let keyFromFile = Self.apiEntry("pin = \"public-key\"\ncertificates = [\"api.pem\", \"other.pem\"]")
        let certFromFile = Self.apiEntry("pin = \"certificate\"\ncertificates = [\"api.pem\", \"other.pem\"]")
        check([
            .init(name: "public-key pin, same certificate", config: keyPin, host: "api.test", chain: "api-chain.pem", expect: "allow"),
            .init(name: "public-key pin, re-issued with the same key", config: keyPin, host: "api.test",
                  chain: "api-rotated-chain.pem", expect: "allow"),
            .init(name: "public-key pin, new key", config: keyPin, host: "api.test",
                  chain: "api-newkey-chain.pem", expect: "refuse: pin-mismatch"),
            .init(name: "certificate pin, same certificate", config: certPin, host: "api.test", chain: "api-chain.pem", expect: "allow"),
            .init(name: "certificate pin, re-issued with the same key", config: certPin, host: "api.test",
                  chain: "api-rotated-chain.pem", expect: "refuse: pin-mismatch"),
            .init(name: "public-key pins from certificate files, re-issued", config: keyFromFile, host: "api.test",
                  chain: "api-rotated-chain.pem", expect: "allow"),
            .init(name: "public-key pins from certificate files, new key", config: keyFromFile, host: "api.test",
                  chain: "api-newkey-chain.pem", expect: "refuse: pin-mismatch"),
            .init(name: "certificate pins from certificate files, same certificate", config: certFromFile, host: "api.test",
                  chain: "api-chain.pem", expect: "allow"),
            .init(name: "certificate pins from certificate files, re-issued", config: certFromFile, host: "api.test",
                  chain: "api-rotated-chain.pem", expect: "refuse: pin-mismatch"),
            .init(name: "a certificate pin is not a key pin", config: Self.apiEntry("pin = \"public-key\"\npins = [\"{cert:api}\", \"{cert:int-a}\"]"),
                  host: "api.test", chain: "api-chain.pem", expect: "refuse: pin-mismatch"),
            .init(name: "a key pin is not a certificate pin", config: Self.apiEntry("pin = \"certificate\"\npins = [\"{spki:api}\", \"{spki:int-a}\"]"),
                  host: "api.test", chain: "api-chain.pem", expect: "refuse: pin-mismatch"),
        ])
    }

    /// A pin may match any position of the verified chain; the verdict says which.
    func testPinMatchPosition() throws {
        for (stem, position) in [("api", 0), ("int-a", 1), ("root-a", 2)] {
            let config = Self.apiEntry("pin = \"public-key\"\npins = [\"{spki:\(stem)}\", \"{spki:other}\"]")
            // The root is not presented: the verified chain, built to the anchor, holds it.
            let verdict = try pki.evaluate(config: config, host: "api.test", chain: "api-chain.pem")
            XCTAssertEqual(verdict.summary, "allow", stem)
            XCTAssertEqual(verdict.pinCheck, .matched(Pin(pki.spki(stem))!, position: position), stem)
        }
        let unpinned = try pki.evaluate(config: Self.apiEntry(), host: "api.test", chain: "api-chain.pem")
        XCTAssertEqual(unpinned.pinCheck, .notPinned)
        let denied = try pki.evaluate(config: Self.apiEntry("action = \"deny\""), host: "api.test", chain: "api-chain.pem")
        XCTAssertEqual(denied.pinCheck, .notReached)
    }

    func testRSAAndECDSA() {
        check([
            .init(name: "RSA leaf under an ECDSA intermediate, key pinned",
                  config: Self.apiEntry("pin = \"public-key\"\npins = [\"{spki:api-rsa}\", \"{spki:api}\"]"),
                  host: "api.test", chain: "api-rsa-chain.pem", expect: "allow"),
            .init(name: "RSA leaf, certificate pinned",
                  config: Self.apiEntry("pin = \"certificate\"\npins = [\"{cert:api-rsa}\", \"{cert:api}\"]"),
                  host: "api.test", chain: "api-rsa-chain.pem", expect: "allow"),
            .init(name: "RSA leaf, only the ECDSA leaf's key pinned",
                  config: Self.apiEntry("pin = \"public-key\"\npins = [\"{spki:api}\", \"{spki:api-newkey}\"]"),
                  host: "api.test", chain: "api-rsa-chain.pem", expect: "refuse: pin-mismatch"),
            .init(name: "ECDSA intermediate under the RSA root, root key pinned",
                  config: "[hosts.\"api.test\"]\ntrust = [\"root-b.pem\"]\npin = \"public-key\"\npins = [\"{spki:root-b}\", \"{spki:root-a}\"]\n",
                  host: "api.test", chain: "untrusted-chain.pem", expect: "allow"),
            .init(name: "RSA root pinned, chain to the ECDSA root",
                  config: "[hosts.\"api.test\"]\ntrust = [\"root-a.pem\", \"root-b.pem\"]\npin = \"public-key\"\npins = [\"{spki:root-b}\", \"{spki:int-b}\"]\n",
                  host: "api.test", chain: "api-chain.pem", expect: "refuse: pin-mismatch"),
        ])
    }

    // MARK: Names

    func testWildcardAndIPNames() {
        let defaultA = "[default]\ntrust = [\"root-a.pem\"]\n"
        check([
            .init(name: "wildcard leaf, one label", config: defaultA, host: "a.wild.test", chain: "wild-chain.pem", expect: "allow"),
            .init(name: "wildcard leaf, upper case host", config: defaultA, host: "A.Wild.Test.", chain: "wild-chain.pem", expect: "allow"),
            .init(name: "wildcard leaf, the parent itself", config: defaultA, host: "wild.test", chain: "wild-chain.pem",
                  expect: "refuse: hostname-mismatch"),
            .init(name: "wildcard leaf, two labels", config: defaultA, host: "a.b.wild.test", chain: "wild-chain.pem",
                  expect: "refuse: hostname-mismatch"),
            .init(name: "IP leaf, IPv4", config: defaultA, host: "127.0.0.1", chain: "ip-chain.pem", expect: "allow"),
            .init(name: "IP leaf, IPv6 in brackets", config: defaultA, host: "[::1]", chain: "ip-chain.pem", expect: "allow"),
            .init(name: "IP leaf, IPv6 long form", config: defaultA, host: "0:0:0:0:0:0:0:1", chain: "ip-chain.pem", expect: "allow"),
            .init(name: "IP leaf, another address", config: defaultA, host: "127.0.0.2", chain: "ip-chain.pem",
                  expect: "refuse: hostname-mismatch"),
            .init(name: "IP leaf, its address as a DNS-looking host is not a name", config: defaultA, host: "localhost",
                  chain: "ip-chain.pem", expect: "refuse: hostname-mismatch"),
            .init(name: "DNS leaf, IP host", config: defaultA, host: "127.0.0.1", chain: "api-chain.pem",
                  expect: "refuse: hostname-mismatch"),
            .init(name: "second SAN name", config: defaultA, host: "www.api.test", chain: "api-chain.pem", expect: "allow"),
            .init(name: "no CN fallback: leaf without SAN", config: defaultA, host: "api.test", chain: "cn-only-chain.pem",
                  expect: "refuse: hostname-mismatch"),
            .init(name: "IP entry found by IP lookup",
                  config: "[hosts.\"::1\"]\ntrust = [\"root-b.pem\"]\n" + defaultA, host: "[0::1]", chain: "ip-chain.pem",
                  expect: "refuse: untrusted-chain"),
            .init(name: "self-signed leaf with an IP SAN, pinned",
                  config: "[hosts.\"127.0.0.1\"]\ntrust = \"pinned\"\npin = \"certificate\"\ncertificates = [\"self.pem\"]\n",
                  host: "127.0.0.1", chain: "self.pem", expect: "allow"),
        ])
    }

    /// validate_host = false with pins skips only the name check.
    func testValidateHostFalse() {
        let config = "[hosts.\"other.test\"]\ntrust = [\"root-a.pem\"]\nvalidate_host = false\npin = \"public-key\"\npins = [\"{spki:api}\", \"{spki:api-newkey}\"]\n"
        check([
            .init(name: "validate_host false: a pinned leaf for another name", config: config, host: "other.test",
                  chain: "api-chain.pem", expect: "allow"),
            .init(name: "validate_host false: the pins still apply", config: config, host: "other.test",
                  chain: "other-chain.pem", expect: "refuse: pin-mismatch"),
            .init(name: "validate_host false: the chain still applies", config: config, host: "other.test",
                  chain: "expired-chain.pem", expect: "refuse: certificate-expired"),
        ])
    }

    // MARK: expires, enforce, allow-insecure

    /// After `expires` pins are not enforced; the chain and the host still are. The pins stop at
    /// midnight UTC after the day written.
    func testExpiredPins() throws {
        let entry = { (expires: String) in
            Self.apiEntry("pin = \"public-key\"\npins = [\"{spki:api-newkey}\", \"{spki:other}\"]\nexpires = \(expires)")
        }
        check([
            .init(name: "expires passed: a wrong key is allowed", config: entry("2026-01-31"), host: "api.test",
                  chain: "api-chain.pem", expect: "allow", failures: []),
            .init(name: "expires the day before: pins ended at midnight", config: entry("2026-05-31"), host: "api.test",
                  chain: "api-chain.pem", expect: "allow"),
            .init(name: "expires today: pins still enforced", config: entry("2026-06-01"), host: "api.test",
                  chain: "api-chain.pem", expect: "refuse: pin-mismatch"),
            .init(name: "expires in the future", config: entry("2027-01-31"), host: "api.test",
                  chain: "api-chain.pem", expect: "refuse: pin-mismatch"),
            .init(name: "expires passed: the host is still validated", config: entry("2026-01-31"), host: "api.test",
                  chain: "other-chain.pem", expect: "refuse: hostname-mismatch", failures: [.hostnameMismatch]),
            .init(name: "expires passed: the chain is still verified", config: entry("2026-01-31"), host: "api.test",
                  chain: "untrusted-chain.pem", expect: "refuse: untrusted-chain", failures: [.untrustedChain]),
            .init(name: "expires passed: expiry is still checked", config: entry("2026-01-31"), host: "api.test",
                  chain: "expired-chain.pem", expect: "refuse: certificate-expired"),
        ])
        let verdict = try pki.evaluate(config: entry("2026-01-31"), host: "api.test", chain: "api-chain.pem")
        XCTAssertEqual(verdict.pinCheck, .expired("2026-01-31"))
        XCTAssertEqual(verdict.notes, ["pins expired on 2026-01-31 and were not enforced"])
    }

    /// `enforce = false` turns pin-mismatch, revocation-unknown, host-denied and port-denied into
    /// report-only (never a silent allow); every other policy reason still refuses.
    func testEnforceFalseRelaxesOnlyPinsRevocationUnknownAndRequestChecks() throws {
        let crl = "revocation = \"crl\"\ncrls = [\"crl-int-a.pem\"]"
        let rows: [(RefusalReason, String, String, String, UInt16)] = [
            (.hostDenied, "action = \"deny\"", "api.test", "api-chain.pem", 443),
            (.portDenied, "ports = [8443]", "api.test", "api-chain.pem", 443),
            (.untrustedChain, "", "api.test", "untrusted-chain.pem", 443),
            (.certificateExpired, "", "api.test", "expired-chain.pem", 443),
            (.certificateNotYetValid, "", "api.test", "notyet-chain.pem", 443),
            (.revoked, crl, "api.test", "revoked-chain.pem", 443),
            (.revocationUnknown, "revocation = \"ocsp-staple\"", "api.test", "api-chain.pem", 443),
            (.hostnameMismatch, "", "api.test", "other-chain.pem", 443),
            (.pinMismatch, "pin = \"public-key\"\npins = [\"{spki:api-newkey}\", \"{spki:other}\"]", "api.test", "api-chain.pem", 443),
        ]
        // custom-check comes from verify_command, after the evaluation: testCustomCheckOnlyRefusesMore;
        // ct-missing needs SCTs and a log list: CTPolicyTests and Tests/e2e/test_ct.py.
        XCTAssertEqual(Set(rows.map(\.0)).union([.customCheck, .ctMissing]), Set(RefusalReason.allCases.filter(\.traits.isPolicyDecision)))
        XCTAssertEqual(RefusalReason.allCases.filter(\.traits.mayBeReportOnly), [.hostDenied, .portDenied, .revocationUnknown, .pinMismatch, .ctMissing, .customCheck])
        var cases: [EvaluationCase] = []
        for (reason, keys, host, chain, port) in rows {
            cases.append(.init(name: "enforced \(reason.rawValue)", config: Self.apiEntry(keys), host: host, port: port,
                               chain: chain, expect: "refuse: \(reason.rawValue)"))
            let relaxed = [.hostDenied, .portDenied, .revocationUnknown, .pinMismatch].contains(reason)
            cases.append(.init(name: "report-only \(reason.rawValue)", config: Self.apiEntry(keys + "\nenforce = false"), host: host,
                               port: port, chain: chain,
                               expect: relaxed ? "allow (would refuse: \(reason.rawValue))" : "refuse: \(reason.rawValue)", failures: [reason]))
        }
        check(cases)
        let pinned = try pki.evaluate(config: Self.apiEntry("pin = \"public-key\"\npins = [\"{spki:api-newkey}\", \"{spki:other}\"]\nenforce = false"),
                                      host: "api.test", chain: "api-chain.pem")
        XCTAssertEqual(pinned.outcome, .reportOnly(.pinMismatch))
        XCTAssertTrue(pinned.allowsConnection)
        let untrusted = try pki.evaluate(config: Self.apiEntry("enforce = false"), host: "api.test", chain: "untrusted-chain.pem")
        XCTAssertEqual(untrusted.outcome, .refuse(.untrustedChain))
        XCTAssertFalse(untrusted.allowsConnection)
        XCTAssertEqual(untrusted.notes, ["enforce = false does not apply to untrusted-chain: only pin, ct-missing, unknown-revocation, custom-check, host and port refusals can be report-only"])
    }

    /// verify_command's answer can only refuse more: a pass changes nothing, a failure adds
    /// custom-check (report-only under enforce = false), and nothing turns a refusal into an allow.
    func testCustomCheckOnlyRefusesMore() throws {
        let failed = CustomCheckResult(passed: false, detail: "check-ct exited with status 1: no SCT")
        let allowed = try pki.evaluate(config: Self.apiEntry(""), host: "api.test", chain: "api-chain.pem")
        XCTAssertEqual(TrustEvaluator.adding(CustomCheckResult(passed: true, detail: ""), to: allowed).outcome, .allow)
        let refused = TrustEvaluator.adding(failed, to: allowed)
        XCTAssertEqual(refused.outcome, .refuse(.customCheck))
        XCTAssertEqual(refused.failures.map(\.description), ["custom-check: check-ct exited with status 1: no SCT"])

        let reportOnly = try pki.evaluate(config: Self.apiEntry("enforce = false"), host: "api.test", chain: "api-chain.pem")
        XCTAssertEqual(TrustEvaluator.adding(failed, to: reportOnly).outcome, .reportOnly(.customCheck))
        let pinReportOnly = try pki.evaluate(config: Self.apiEntry("pin = \"public-key\"\npins = [\"{spki:api-newkey}\", \"{spki:other}\"]\nenforce = false"),
                                             host: "api.test", chain: "api-chain.pem")
        let both = TrustEvaluator.adding(failed, to: pinReportOnly)
        XCTAssertEqual(both.outcome, .reportOnly(.pinMismatch))
        XCTAssertEqual(both.failures.map(\.reason), [.pinMismatch, .customCheck])

        let untrusted = try pki.evaluate(config: Self.apiEntry(""), host: "api.test", chain: "untrusted-chain.pem")
        XCTAssertFalse(TrustEvaluator.needsCustomCheck(untrusted))
        XCTAssertEqual(TrustEvaluator.adding(CustomCheckResult(passed: true, detail: ""), to: untrusted).outcome, .refuse(.untrustedChain))
    }

    /// The reproduction: a self-signed, expired certificate for another name, served to a
    /// report-only entry and to a report-only `[default]`, is refused, and named by the most
    /// important always-enforced reason even after a relaxed one.
    func testReportOnlyIsNeverASilentManInTheMiddle() {
        let pinned = "pin = \"public-key\"\npins = [\"{spki:api-newkey}\", \"{spki:other}\"]\nenforce = false"
        check([
            .init(name: "report-only entry, self-signed expired other name", config: "[hosts.\"*.cdn.test\"]\n" + pinned,
                  host: "a.cdn.test", chain: "expired-selfsigned.pem", expect: "refuse: untrusted-chain"),
            .init(name: "report-only default, self-signed expired other name", config: "[default]\nenforce = false\n",
                  host: "a.cdn.test", chain: "expired-selfsigned.pem", expect: "refuse: untrusted-chain"),
            .init(name: "a relaxed port refusal before an enforced one", config: Self.apiEntry("ports = [8443]\nenforce = false"),
                  host: "api.test", chain: "expired-chain.pem", expect: "refuse: certificate-expired",
                  failures: [.portDenied, .certificateExpired]),
            .init(name: "relaxed reasons only", config: Self.apiEntry("ports = [8443]\n" + pinned), host: "api.test",
                  chain: "api-chain.pem", expect: "allow (would refuse: port-denied)", failures: [.portDenied, .pinMismatch]),
        ])
    }

    /// allow-insecure checks nothing about the certificate, but the port still applies.
    func testAllowInsecure() throws {
        let entry = Self.apiEntry("action = \"allow-insecure\"")
        check([
            .init(name: "allow-insecure: expired", config: entry, host: "api.test", chain: "expired-chain.pem", expect: "allow", failures: []),
            .init(name: "allow-insecure: wrong name and root", config: entry, host: "api.test", chain: "other-chain.pem", expect: "allow"),
            .init(name: "allow-insecure: the port is still checked", config: entry + "\nports = [8443]", host: "api.test",
                  chain: "api-chain.pem", expect: "refuse: port-denied"),
        ])
        let verdict = try pki.evaluate(config: entry, host: "api.test", chain: "untrusted-chain.pem")
        XCTAssertEqual(verdict.notes, ["hosts.\"api.test\" has action = \"allow-insecure\": no certificate check was made"])
        XCTAssertTrue(verdict.verified.isEmpty)
    }

    /// The entry's client certificate goes only to a server that passed the whole verdict: a
    /// report-only failure withholds it, and allow-insecure (which checks nothing) never releases it.
    func testOnlyAPassedVerdictReleasesTheClientCertificate() throws {
        let pinned = "pin = \"public-key\"\npins = [\"{spki:api}\", \"{spki:api-rsa}\"]"
        let cases: [(String, String, String, Bool)] = [
            ("passed", Self.apiEntry(pinned), "api-chain.pem", true),
            ("pin-mismatch", Self.apiEntry(pinned), "api-newkey-chain.pem", false),
            ("report-only pin-mismatch", Self.apiEntry(pinned + "\nenforce = false"), "api-newkey-chain.pem", false),
            ("untrusted", Self.apiEntry(), "untrusted-chain.pem", false),
            ("allow-insecure", Self.apiEntry("action = \"allow-insecure\""), "api-chain.pem", false),
        ]
        for (name, config, chain, releases) in cases {
            let verdict = try pki.evaluate(config: config, host: "api.test", chain: chain)
            XCTAssertEqual(verdict.releasesClientCertificate, releases, "\(name): \(verdict.summary)")
        }
        let reportOnly = try pki.evaluate(config: Self.apiEntry(pinned + "\nenforce = false"), host: "api.test", chain: "api-newkey-chain.pem")
        XCTAssertTrue(reportOnly.allowsConnection, "report-only lets the connection go on, without the certificate")
    }

    // MARK: Several failures

    /// Every failure is kept, most important first; the first names the verdict.
    func testPriorityWithSeveralFailures() throws {
        let pinned = "pin = \"public-key\"\npins = [\"{spki:api-newkey}\", \"{spki:other}\"]"
        check([
            .init(name: "expired and wrong host", config: "[default]\ntrust = [\"root-a.pem\"]\n", host: "other.test",
                  chain: "expired-chain.pem", expect: "refuse: certificate-expired", failures: [.certificateExpired, .hostnameMismatch]),
            .init(name: "not yet valid, wrong host, wrong pin",
                  config: "[hosts.\"other.test\"]\ntrust = [\"root-a.pem\"]\n" + pinned, host: "other.test",
                  chain: "notyet-chain.pem", expect: "refuse: certificate-not-yet-valid",
                  failures: [.certificateNotYetValid, .hostnameMismatch, .pinMismatch]),
            .init(name: "revoked, wrong host, wrong pin",
                  config: "[hosts.\"other.test\"]\ntrust = [\"root-a.pem\"]\nrevocation = \"crl\"\ncrls = [\"crl-int-a.pem\"]\n" + pinned,
                  host: "other.test", chain: "revoked-chain.pem", expect: "refuse: revoked",
                  failures: [.revoked, .hostnameMismatch, .pinMismatch]),
            .init(name: "untrusted, wrong host", config: "[default]\ntrust = [\"root-b.pem\"]\n", host: "other.test",
                  chain: "api-chain.pem", expect: "refuse: untrusted-chain", failures: [.untrustedChain, .hostnameMismatch]),
            .init(name: "wrong host and wrong pin", config: "[hosts.\"other.test\"]\ntrust = [\"root-a.pem\"]\n" + pinned,
                  host: "other.test", chain: "api-chain.pem", expect: "refuse: hostname-mismatch",
                  failures: [.hostnameMismatch, .pinMismatch]),
            .init(name: "report-only port refusal still evaluates the chain",
                  config: Self.apiEntry("ports = [8443]\nenforce = false"), host: "api.test",
                  chain: "expired-chain.pem", expect: "refuse: certificate-expired",
                  failures: [.portDenied, .certificateExpired]),
            .init(name: "denied before everything", config: Self.apiEntry("action = \"deny\"\nports = [8443]"), host: "api.test",
                  chain: "expired-chain.pem", expect: "refuse: host-denied", failures: [.hostDenied, .portDenied]),
            .init(name: "port before the certificate", config: Self.apiEntry("ports = [8443]"), host: "api.test",
                  chain: "expired-chain.pem", expect: "refuse: port-denied", failures: [.portDenied]),
            .init(name: "report-only still names the most important", config: "[default]\ntrust = [\"root-a.pem\"]\nenforce = false\n",
                  host: "other.test", chain: "expired-chain.pem", expect: "refuse: certificate-expired",
                  failures: [.certificateExpired, .hostnameMismatch]),
        ])
        let verdict = try pki.evaluate(config: "[default]\ntrust = [\"root-a.pem\"]\n", host: "other.test", chain: "expired-chain.pem")
        XCTAssertEqual(verdict.failures.last?.description,
                       "hostname-mismatch: other.test is not among the leaf's subjectAltNames (DNS:api.test, DNS:www.api.test)")
        XCTAssertEqual(verdict.failures.first?.description,
                       "certificate-expired: certificate has expired (depth 0: CN=api.test,O=pinproxy tests)")
    }

    // MARK: Revocation

    func testCRL() {
        let crl = { (files: String) in Self.apiEntry("revocation = \"crl\"\ncrls = [\(files)]") }
        check([
            .init(name: "CRL: revoked leaf", config: crl("\"crl-int-a.pem\""), host: "api.test",
                  chain: "revoked-chain.pem", expect: "refuse: revoked"),
            .init(name: "CRL (DER): revoked leaf", config: crl("\"crl-int-a.der\""), host: "api.test",
                  chain: "revoked-chain.pem", expect: "refuse: revoked"),
            .init(name: "CRL: a leaf it does not list", config: crl("\"crl-int-a.pem\""), host: "api.test",
                  chain: "api-chain.pem", expect: "allow", failures: []),
            .init(name: "CRL: out of date", config: crl("\"crl-int-a-stale.pem\""), host: "api.test",
                  chain: "api-chain.pem", expect: "refuse: revocation-unknown"),
            .init(name: "CRL: out of date, for a revoked leaf", config: crl("\"crl-int-a-stale.pem\""), host: "api.test",
                  chain: "revoked-chain.pem", expect: "refuse: revoked"),
            .init(name: "CRL: only another issuer's CRL", config: crl("\"crl-root-b.pem\""), host: "api.test",
                  chain: "api-chain.pem", expect: "refuse: revocation-unknown", failures: [.revocationUnknown]),
            .init(name: "CRL: the issuer's among others", config: crl("\"crl-root-b.pem\", \"crl-int-a.pem\""), host: "api.test",
                  chain: "api-chain.pem", expect: "allow"),
            .init(name: "CRL: a chain through root B with its CRL",
                  config: "[hosts.\"api.test\"]\ntrust = [\"root-b.pem\"]\nrevocation = \"crl\"\ncrls = [\"crl-root-b.pem\"]\n",
                  host: "api.test", chain: "untrusted-chain.pem", expect: "refuse: revocation-unknown"),
        ])
    }

    func testOCSPStaple() {
        let staple = Self.apiEntry("revocation = \"ocsp-staple\"")
        check([
            .init(name: "staple required, none sent", config: staple, host: "api.test", chain: "api-chain.pem",
                  expect: "refuse: revocation-unknown", failures: [.revocationUnknown]),
            .init(name: "staple good", config: staple, host: "api.test", chain: "api-chain.pem", staple: "ocsp-api-good.der",
                  expect: "allow", failures: []),
            .init(name: "staple revoked", config: staple, host: "api.test", chain: "revoked-chain.pem", staple: "ocsp-revoked.der",
                  expect: "refuse: revoked", failures: [.revoked]),
            .init(name: "staple out of date", config: staple, host: "api.test", chain: "api-chain.pem", staple: "ocsp-api-stale.der",
                  expect: "refuse: revocation-unknown"),
            .init(name: "staple about another certificate", config: staple, host: "api.test", chain: "revoked-chain.pem",
                  staple: "ocsp-api-good.der", expect: "refuse: revocation-unknown"),
            .init(name: "staple about a certificate with the same key", config: staple, host: "api.test",
                  chain: "api-rotated-chain.pem", staple: "ocsp-api-good.der", expect: "refuse: revocation-unknown"),
            .init(name: "not an OCSP response", config: staple, host: "api.test", chain: "api-chain.pem", staple: "api.der",
                  expect: "refuse: revocation-unknown"),
            .init(name: "staple good, before its thisUpdate", config: staple, host: "api.test", chain: "api-chain.pem",
                  staple: "ocsp-api-good.der", at: date("2026-04-01T00:00:00Z"), expect: "refuse: revocation-unknown"),
            .init(name: "staple not required", config: Self.apiEntry(), host: "api.test", chain: "revoked-chain.pem",
                  staple: "ocsp-revoked.der", expect: "allow"),
            .init(name: "staple on a pinned leaf without issuer",
                  config: "[hosts.\"self.test\"]\ntrust = \"pinned\"\npin = \"certificate\"\ncertificates = [\"self.pem\"]\nrevocation = \"ocsp-staple\"\n",
                  host: "self.test", chain: "self.pem", staple: "ocsp-api-good.der", expect: "refuse: revocation-unknown"),
        ])
    }

    func testOCSPStapleDetails() throws {
        let staple = Self.apiEntry("revocation = \"ocsp-staple\"")
        let none = try pki.evaluate(config: staple, host: "api.test", chain: "api-chain.pem")
        XCTAssertEqual(none.failures.map(\.description), ["revocation-unknown: the policy requires an OCSP staple and the server sent none"])
        let revoked = try pki.evaluate(config: staple, host: "api.test", chain: "revoked-chain.pem", staple: "ocsp-revoked.der")
        XCTAssertEqual(revoked.failures.map(\.description), ["revoked: the OCSP staple says the leaf was revoked on 2025-06-01T00:00:00Z"])
        let stale = try pki.evaluate(config: staple, host: "api.test", chain: "api-chain.pem", staple: "ocsp-api-stale.der")
        XCTAssertEqual(stale.failures.first?.reason, .revocationUnknown)
        XCTAssertTrue(stale.failures.first?.detail.hasPrefix("the staple is out of date") ?? false, "\(stale.failures)")
    }

    // MARK: Without the loader

    /// `evaluate` is a pure function of its inputs: a hand-built entry gives the same verdict,
    /// and evaluating twice gives the same answer.
    /// `verifiedPath` is the path OpenSSL verified, leaf to anchor, whatever else the server
    /// presented; nil when OpenSSL verified none (decision lines log it as `verified_pins`).
    func testVerifiedPathIsOnlyWhatOpenSSLVerified() throws {
        func path(_ config: String, _ chain: [Certificate]) throws -> [String]? {
            let target = try XCTUnwrap(TargetHost("api.test"))
            let loaded = try pki.loadConfig(config)
            let verdict = TrustEvaluator.evaluate(.init(chain: chain), host: target, port: 443, entry: loaded.policies.lookup(target),
                                                  context: loaded.verdictContext, at: evaluationTime)
            XCTAssertEqual(verdict.presented.count, chain.count)
            return verdict.verifiedPath.map { $0.map { Pin(digest: $0.publicKeySHA256).description } }
        }
        let apiChain = try pki.certificates("api-chain.pem")
        let expected = ["api", "int-a", "root-a"].map(pki.spki)
        XCTAssertEqual(try path(Self.apiEntry(), apiChain), expected)
        XCTAssertEqual(try path(Self.apiEntry(), try pki.certificates("api-fullchain.pem")), expected)
        // An unrelated self-signed certificate after a chain that verifies is off the path.
        XCTAssertEqual(try path(Self.apiEntry(), apiChain + [try pki.certificate("root-b.pem")]), expected)
        // A report-only pin mismatch: the path was verified all the same.
        XCTAssertEqual(try path(Self.apiEntry("enforce = false\npin = \"public-key\"\npins = [\"{spki:api-newkey}\"]"), apiChain), expected)
        // No path verified: an unknown issuer, an expired leaf, trust = "none", allow-insecure.
        XCTAssertNil(try path(Self.apiEntry(), try pki.certificates("untrusted-chain.pem")))
        XCTAssertNil(try path(Self.apiEntry(), try pki.certificates("expired-chain.pem")))
        XCTAssertNil(try path("[hosts.\"api.test\"]\ntrust = \"none\"\npin = \"public-key\"\npins = [\"{spki:api}\"]", apiChain))
        XCTAssertNil(try path("[hosts.\"api.test\"]\naction = \"allow-insecure\"", apiChain))
    }

    func testHandBuiltEntry() throws {
        let root = try pki.certificate("root-a.pem")
        var settings = HostPolicy.Settings(trust: .anchors(try TrustStore(anchors: [root]), [root]), ports: [443])
        settings.pinKind = .certificate
        settings.pins = [Pin(pki.certPin("int-a"))!]
        let policy = try HostPolicy(settings)
        let entry = PolicyEntry(pattern: HostPattern("api.test"), name: "hosts.\"api.test\"", line: 0, policy: policy)
        let chain = TrustEvaluator.Presentation(chain: try pki.certificates("api-chain.pem"))
        let context = VerdictContext(publicSuffixes: try PublicSuffixList.loadSystem())
        for _ in 0..<2 {
            let verdict = TrustEvaluator.evaluate(chain, host: TargetHost("api.test")!, port: 443, entry: entry, context: context, at: evaluationTime)
            XCTAssertEqual(verdict.summary, "allow")
            XCTAssertEqual(verdict.pinCheck, .matched(Pin(pki.certPin("int-a"))!, position: 1))
        }
        let other = TrustEvaluator.evaluate(chain, host: TargetHost("www.api.test")!, port: 80, entry: entry, context: context, at: evaluationTime)
        XCTAssertEqual(other.failures.map(\.description), ["port-denied: port 80 is not allowed for hosts.\"api.test\" (allowed: 443)"])
    }

    /// A policy that would fail open cannot be built, whoever builds it: no anchor and no pin,
    /// no host check and no pin, a pin kind without pins, or report-only or expiring pins where
    /// the pins are all that protects the entry.
    func testFailOpenPoliciesCannotBeBuilt() throws {
        let root = try pki.certificate("root-a.pem")
        let store = try TrustStore(anchors: [root])
        let pins = [Pin(pki.spki("api"))!, Pin(pki.spki("api-newkey"))!]
        func settings(_ trust: HostPolicy.Trust, _ change: (inout HostPolicy.Settings) -> Void) -> HostPolicy.Settings {
            var settings = HostPolicy.Settings(trust: trust, ports: [443])
            change(&settings)
            return settings
        }
        let refused: [(String, HostPolicy.Settings, String)] = [
            ("trust none, no pins", settings(.none) { _ in }, "trust = \"none\" without pins would accept any certificate"),
            ("trust none, a pin kind and no pins", settings(.none) { $0.pinKind = .publicKey }, "pin = \"public-key\" with no pins"),
            ("trust none, pins but pin none", settings(.none) { $0.pins = pins }, "trust = \"none\" without pins would accept any certificate"),
            ("no host check, no pins", settings(.anchors(store, [root])) { $0.validateHost = false },
             "validate_host = false without pins would accept a certificate for any name"),
            ("trust none, report-only", settings(.none) { $0.pinKind = .publicKey; $0.pins = pins; $0.enforce = false },
             "enforce = false where the pins are the only protection would drop them"),
            ("no host check, expiring pins",
             settings(.anchors(store, [root])) { $0.validateHost = false; $0.pinKind = .publicKey; $0.pins = pins; $0.expires = "2026-01-01" },
             "expires where the pins are the only protection would end all protection"),
        ]
        for (name, unsafe, message) in refused {
            XCTAssertThrowsError(try HostPolicy(unsafe), name) { error in
                XCTAssertEqual("\(error)", message, name)
            }
        }
        // Their safe twins build.
        XCTAssertNoThrow(try HostPolicy(settings(.none) { $0.pinKind = .publicKey; $0.pins = pins }))
        XCTAssertNoThrow(try HostPolicy(settings(.anchors(store, [root])) { $0.validateHost = false; $0.pinKind = .publicKey; $0.pins = pins }))
        XCTAssertNoThrow(try HostPolicy(settings(.anchors(store, [root])) { $0.enforce = false }))
    }
}
