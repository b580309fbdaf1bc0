import Foundation
import PinproxyInterop
import PinproxyPolicy
import XCTest

/// `NameAuthentication`: one test per row of the table in docs/trust-decisions.md ("Which
/// admissions authenticate the name"), each on an entry loaded from config text where the
/// loader accepts it, and on bare settings where `check` refuses the combination (the rule must
/// still fail closed on them).
final class NameAuthenticationTests: XCTestCase {
    static let pins = #"pin = "public-key"\#npins = ["sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "sha256/BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBA="]"#

    /// The answer for the entry of `a.test` written as `keys`, at `time`.
    func answer(_ keys: String, at time: Date = evaluationTime, file: StaticString = #filePath, line: UInt = #line) throws -> NameAuthentication {
        let text = "[hosts.\"a.test\"]\n\(keys)\n"
        let config = try ConfigLoader.load(text: text, path: "n.toml", directory: "/", now: evaluationTime)
        let entry = config.policies.lookup(.name("a.test"))
        XCTAssertEqual(entry.name, #"hosts."a.test""#, file: file, line: line)
        return NameAuthentication.of(entry.policy.settings, at: time)
    }

    func proven(_ keys: String, at time: Date = evaluationTime, file: StaticString = #filePath, line: UInt = #line) throws {
        let result = try answer(keys, at: time, file: file, line: line)
        XCTAssertTrue(result.isProven, "\(keys): \(result)", file: file, line: line)
    }

    func unproven(_ keys: String, saying words: String, at time: Date = evaluationTime, file: StaticString = #filePath, line: UInt = #line) throws {
        let result = try answer(keys, at: time, file: file, line: line)
        XCTAssertFalse(result.isProven, "\(keys): \(result)", file: file, line: line)
        XCTAssertTrue(result.why.contains(words), "\(keys): \(result.why)", file: file, line: line)
    }

    func testVerifiedChainAndHostNameProveTheName() throws {
        try proven(#"trust = "system""#)
        try proven("trust = \"system\"\n\(Self.pins)")
        try proven(#"trust = "system"\#nrevocation = "ocsp-staple""#)
        try proven(#"trust = "system"\#nverify_command = ["/bin/true"]"#)
    }

    func testTheDefaultEntryProvesTheName() throws {
        let config = try ConfigLoader.load(text: "", path: "n.toml", directory: "/", now: evaluationTime)
        let entry = config.policies.lookup(.name("anything.test"))
        XCTAssertEqual(entry.name, "default")
        XCTAssertEqual(entry.policy.action, .verify)
        XCTAssertTrue(NameAuthentication.of(entry.policy.settings, at: evaluationTime).isProven)
    }

    func testAllowInsecureProvesNothing() throws {
        try unproven(#"action = "allow-insecure""#, saying: #"action = "allow-insecure""#)
    }

    func testATunnelProvesNothing() throws {
        try unproven(#"mode = "tunnel""#, saying: #"mode = "tunnel""#)
    }

    /// Report-only relaxes pins, revocation, a custom check, host and port, never the chain or
    /// the name: the name is still proven.
    func testReportOnlyStillProvesTheName() throws {
        try proven("trust = \"system\"\nenforce = false\n\(Self.pins)")
        try proven(#"trust = "system"\#nenforce = false\#nrevocation = "ocsp-staple""#)
        try proven(#"action = "deny"\#nenforce = false"#)
        try proven(#"ports = [8443]\#nenforce = false"#)
    }

    /// Expired pins leave the chain and the name checked: still proven, before and after.
    func testExpiredPinsStillProveTheNameWhereTheChainIsVerified() throws {
        let keys = "trust = \"system\"\nexpires = 2026-07-01\n\(Self.pins)"
        try proven(keys)
        try proven(keys, at: date("2026-08-01T00:00:00Z"))
    }

    func testAPinnedLeafWithoutAChainProvesTheName() throws {
        try proven("trust = \"none\"\n\(Self.pins)")
        try proven("trust = \"none\"\nvalidate_host = false\n\(Self.pins)")
    }

    func testValidateHostFalseWithAVerifiedChainProvesNothing() throws {
        try unproven("trust = \"system\"\nvalidate_host = false\n\(Self.pins)", saying: "validate_host = false")
    }

    /// What `check` refuses (HostPolicy.Settings.failOpenReason) still fails closed here.
    func testSettingsTheLoaderRefusesFailClosed() throws {
        let pins = [Pin(digest: [UInt8](repeating: 1, count: 32)), Pin(digest: [UInt8](repeating: 2, count: 32))]
        func settings(_ change: (inout HostPolicy.Settings) -> Void) -> HostPolicy.Settings {
            var settings = HostPolicy.Settings(trust: .none, ports: [443])
            settings.pinKind = .publicKey
            settings.pins = pins
            change(&settings)
            return settings
        }
        XCTAssertTrue(NameAuthentication.of(settings { _ in }, at: evaluationTime).isProven)
        let unpinned = NameAuthentication.of(settings { $0.pinKind = .none; $0.pins = [] }, at: evaluationTime)
        XCTAssertEqual(unpinned, .unproven(why: #"has trust = "none" and no pins, so nothing is checked"#))
        let reportOnly = NameAuthentication.of(settings { $0.enforce = false }, at: evaluationTime)
        XCTAssertFalse(reportOnly.isProven)
        XCTAssertTrue(reportOnly.why.contains("enforce = false"), reportOnly.why)
        let expiring = settings { $0.expires = "2026-07-01"; $0.pinsExpireAt = date("2026-07-02T00:00:00Z") }
        XCTAssertTrue(NameAuthentication.of(expiring, at: evaluationTime).isProven)
        let expired = NameAuthentication.of(expiring, at: date("2026-07-02T00:00:00Z"))
        XCTAssertEqual(expired, .unproven(why: #"has trust = "none" and its pins expired on 2026-07-01, so nothing is checked"#))
        XCTAssertFalse(NameAuthentication.of(settings { $0.action = .allowInsecure }, at: evaluationTime).isProven)
        XCTAssertFalse(NameAuthentication.of(settings { $0.mode = .tunnel }, at: evaluationTime).isProven)
    }
}
