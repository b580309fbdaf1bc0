import Foundation
import PinproxyInterop
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
}
