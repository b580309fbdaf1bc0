import Foundation
import PinproxyCore
import PinproxyInterop
@testable import PinproxyPolicy
import XCTest

/// `Certificate.nameConstraintsPermit`, which binds the requested host to each issuer's
/// nameConstraints: it fails closed on an extension it cannot read.
final class NameConstraintsTests: XCTestCase {
    private func certificate(_ name: String) throws -> Certificate {
        let workspace = try WebPKIRuleTests.fixtures.get()
        guard let first = try Certificate.parseAll(Array(try Data(contentsOf: URL(fileURLWithPath: workspace.directory + "/" + name)))).first else {
            throw FixtureError(description: "\(name) holds no certificate")
        }
        return first
    }

    func testConstraintsPermitOnlyTheirNames() throws {
        let constrained = try certificate("rules-nc-api-ca.pem")
        XCTAssertTrue(constrained.nameConstraintsPermit(dnsName: "api.test"))
        XCTAssertFalse(constrained.nameConstraintsPermit(dnsName: "other.test"))
        XCTAssertTrue(try certificate("rules-root.pem").nameConstraintsPermit(dnsName: "other.test"), "no extension, no constraint")
    }

    /// A nameConstraints OpenSSL cannot decode permits nothing: it is refused where it is read,
    /// whatever other rule might also catch it.
    func testUndecodableConstraintsPermitNothing() throws {
        let malformed = try certificate("rules-nc-malformed-ca.pem")
        XCTAssertEqual(malformed.criticality(of: .nameConstraints), true, "the fixture carries the extension")
        XCTAssertNil(malformed.nameConstraints, "the fixture's extension must not decode")
        XCTAssertFalse(malformed.nameConstraintsPermit(dnsName: "api.test"))
        XCTAssertFalse(malformed.nameConstraintsPermit(dnsName: "other.test"))
    }

    /// The DNS subtree rule of OpenSSL's matcher, which `nameConstraintsPermit` follows.
    func testDNSSubtrees() {
        let within: [(String, String, Bool)] = [
            ("api.test", "api.test", true), ("x.api.test", "api.test", true), ("y.x.api.test", "api.test", true),
            ("xapi.test", "api.test", false), ("test", "api.test", false),
            ("x.api.test", ".api.test", true), ("api.test", ".api.test", false),
            ("api.test", "API.Test", true), ("anything.test", "", true), ("api.test", "pi.test", false),
        ]
        for (name, base, expected) in within {
            XCTAssertEqual(NameConstraints.dnsName(name, isWithin: base), expected, "\(name) within \(base)")
        }
    }

    func testPermittedAndExcludedSubtrees() {
        typealias Subtree = GeneralSubtree
        let apiOnly = NameConstraints(permitted: [Subtree(base: .dns("api.test"))], excluded: nil)
        XCTAssertTrue(apiOnly.permit(dnsName: "x.api.test"))
        XCTAssertFalse(apiOnly.permit(dnsName: "other.test"))
        let excluding = NameConstraints(permitted: [Subtree(base: .dns("api.test"))], excluded: [Subtree(base: .dns("bad.api.test"))])
        XCTAssertTrue(excluding.permit(dnsName: "good.api.test"))
        XCTAssertFalse(excluding.permit(dnsName: "x.bad.api.test"))
        let otherKinds = NameConstraints(permitted: [Subtree(base: .ip([10, 0, 0, 0, 255, 0, 0, 0]))], excluded: nil)
        XCTAssertTrue(otherKinds.permit(dnsName: "other.test"), "no DNS subtree: DNS names are not constrained")
        XCTAssertTrue(NameConstraints(permitted: nil, excluded: nil).permit(dnsName: "api.test"))
    }

    /// Bounds other than the default (minimum 0, no maximum) on a DNS subtree permit nothing,
    /// whether the subtree would match or not; on a subtree of another kind they do not matter.
    func testNonDefaultBoundsPermitNothing() {
        typealias Subtree = GeneralSubtree
        let bounded = NameConstraints(permitted: [Subtree(base: .dns("api.test"), hasDefaultBounds: false)], excluded: nil)
        XCTAssertFalse(bounded.permit(dnsName: "api.test"))
        let boundedExclusion = NameConstraints(permitted: nil, excluded: [Subtree(base: .dns("bad.test"), hasDefaultBounds: false)])
        XCTAssertFalse(boundedExclusion.permit(dnsName: "api.test"))
        let boundedIP = NameConstraints(permitted: [Subtree(base: .ip([10, 0, 0, 0, 255, 0, 0, 0]), hasDefaultBounds: false)], excluded: nil)
        XCTAssertTrue(boundedIP.permit(dnsName: "api.test"))
    }
}
