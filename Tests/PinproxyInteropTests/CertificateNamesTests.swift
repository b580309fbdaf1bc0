import Foundation
import PinproxyInterop
import XCTest

/// The readers of a certificate's subjectAltName, extendedKeyUsage and nameConstraints, on
/// certificates the `openssl` command makes for each test.
final class CertificateNamesTests: XCTestCase {
    private var directory: URL!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("pinproxy-names-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try FileManager.default.removeItem(at: directory)
    }

    /// A self-signed P-256 certificate whose extensions are the config lines `extensions`.
    private func certificate(_ extensions: [String]) throws -> Certificate {
        let config = directory.appendingPathComponent("req.cnf")
        try ("[req]\ndistinguished_name = dn\n[dn]\n[ext]\n" + extensions.joined(separator: "\n") + "\n").write(to: config, atomically: true, encoding: .utf8)
        let output = directory.appendingPathComponent("cert.pem")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                             "-keyout", directory.appendingPathComponent("key.pem").path, "-out", output.path,
                             "-subj", "/CN=names test", "-days", "1", "-config", config.path, "-extensions", "ext"]
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0, "openssl req failed for \(extensions)")
        let certificates = try Certificate.parseAll(Array(try Data(contentsOf: output)))
        return try XCTUnwrap(certificates.first)
    }

    func testSubjectAltNameEntriesInOrder() throws {
        let certificate = try certificate(["subjectAltName = DNS:api.test, IP:192.0.2.1, email:ops@api.test, IP:2001:db8::1"])
        XCTAssertEqual(certificate.subjectAltNameEntries, [
            .dns("api.test"), .ip([192, 0, 2, 1]), .other(1),  // GEN_EMAIL
            .ip([0x20, 0x01, 0x0d, 0xb8] + [UInt8](repeating: 0, count: 11) + [1]),
        ])
        XCTAssertEqual(certificate.subjectAlternativeNames, ["DNS:api.test", "IP:192.0.2.1", "IP:2001:db8::1"])
        XCTAssertEqual(certificate.criticality(of: .subjectAltName), false)
    }

    func testNoSubjectAltName() throws {
        let certificate = try certificate(["basicConstraints = CA:false"])
        XCTAssertEqual(certificate.subjectAltNameEntries, [])
        XCTAssertEqual(certificate.subjectAlternativeNames, [])
        XCTAssertNil(certificate.criticality(of: .subjectAltName))
    }

    func testExtendedKeyUsage() throws {
        let server = try certificate(["extendedKeyUsage = serverAuth, clientAuth"])
        XCTAssertEqual(server.extendedKeyUsage, [.serverAuth, .clientAuth])
        XCTAssertEqual(server.criticality(of: .extendedKeyUsage), false)
        let client = try certificate(["extendedKeyUsage = critical, clientAuth"])
        XCTAssertEqual(client.extendedKeyUsage, [.clientAuth])
        XCTAssertEqual(client.criticality(of: .extendedKeyUsage), true)
        let any = try certificate(["extendedKeyUsage = anyExtendedKeyUsage"])
        XCTAssertEqual(any.extendedKeyUsage, [.any])
        XCTAssertNil(try certificate(["basicConstraints = CA:false"]).extendedKeyUsage, "no extension: every usage")
    }

    func testNameConstraintsDecoded() throws {
        let certificate = try certificate([
            "basicConstraints = critical, CA:true",
            "nameConstraints = critical, permitted;DNS:api.test, permitted;IP:10.0.0.0/255.0.0.0, excluded;DNS:.bad.api.test",
        ])
        XCTAssertEqual(certificate.nameConstraintsExtension, .decoded(.init(
            permitted: [.init(base: .dns("api.test")), .init(base: .ip([10, 0, 0, 0, 255, 0, 0, 0]))],
            excluded: [.init(base: .dns(".bad.api.test"))])))
        XCTAssertEqual(certificate.nameConstraints?.excluded, [.init(base: .dns(".bad.api.test"))])
        let permittedOnly = try self.certificate(["nameConstraints = permitted;DNS:api.test"])
        XCTAssertEqual(permittedOnly.nameConstraints, .init(permitted: [.init(base: .dns("api.test"))], excluded: nil))
    }

    func testNoNameConstraints() throws {
        let certificate = try certificate(["basicConstraints = critical, CA:true"])
        XCTAssertEqual(certificate.nameConstraintsExtension, .absent)
        XCTAssertNil(certificate.nameConstraints)
    }

    /// A nameConstraints that is not a NameConstraints (a SEQUENCE holding an OCTET STRING).
    func testUndecodableNameConstraints() throws {
        let certificate = try certificate(["basicConstraints = critical, CA:true", "2.5.29.30 = critical, DER:3003040100"])
        XCTAssertEqual(certificate.criticality(of: .nameConstraints), true)
        XCTAssertEqual(certificate.nameConstraintsExtension, .undecodable)
        XCTAssertNil(certificate.nameConstraints)
    }

    /// Two nameConstraints extensions. `openssl req` keeps one extension per type, so the
    /// second is made under the unassigned OID 2.5.29.99, whose DER (06 03 55 1D 63) is then
    /// renamed 2.5.29.30 in place: same length, nothing re-encoded (the signature no longer
    /// verifies, which parsing does not look at).
    func testRepeatedNameConstraints() throws {
        let made = try certificate([
            "basicConstraints = critical, CA:true",
            "nameConstraints = critical, permitted;DNS:api.test",
            "2.5.29.99 = critical, DER:300aa0083006820461706932",
        ])
        var der = made.der
        let unassigned: [UInt8] = [0x06, 0x03, 0x55, 0x1D, 0x63]
        let start = try XCTUnwrap((0...(der.count - unassigned.count)).first { Array(der[$0..<$0 + unassigned.count]) == unassigned })
        der[start + 4] = 0x1E
        let repeated = try Certificate(der: der)
        XCTAssertEqual(repeated.nameConstraintsExtension, .repeated)
        XCTAssertNil(repeated.nameConstraints)
    }
}
