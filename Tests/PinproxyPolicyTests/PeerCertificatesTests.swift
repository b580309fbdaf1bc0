import Dispatch
import Foundation
import PinproxyCore
@testable import PinproxyInterop
import XCTest

/// What a certificate yields (DER, digests, subject) is computed once and kept, and a loop's
/// `PeerCertificates` gives every connection of a session the same `Certificate`. Neither may
/// change an answer: each case compares with a certificate parsed afresh.
final class PeerCertificatesTests: XCTestCase {
    var chain: [Certificate]!

    override func setUpWithError() throws {
        chain = try PKI.shared().certificates("api-chain.pem")
    }

    private func fresh(_ certificate: Certificate) throws -> Certificate { try Certificate(der: certificate.der) }

    func testKeptValuesAreTheValuesOfAFreshParse() throws {
        for certificate in chain {
            // Twice: the first call computes and keeps, the second answers from what was kept.
            for _ in 0..<2 {
                let parsed = try fresh(certificate)
                XCTAssertEqual(certificate.der, parsed.der)
                XCTAssertEqual(certificate.certificateSHA256, SHA256.hash(parsed.der))
                XCTAssertEqual(certificate.publicKeySHA256, SHA256.hash(parsed.subjectPublicKeyInfoDER))
                XCTAssertEqual(certificate.subject, parsed.subject)
                XCTAssertEqual(certificate.subjectCommonNames, parsed.subjectCommonNames)
                XCTAssertEqual(certificate.subjectAltNameEntries, parsed.subjectAltNameEntries)
                XCTAssertEqual(certificate.undecodableExtensions, parsed.undecodableExtensions)
            }
        }
        XCTAssertNotEqual(chain[0].certificateSHA256, chain[1].certificateSHA256)
        XCTAssertNotEqual(chain[0].publicKeySHA256, chain[1].publicKeySHA256)
        XCTAssertFalse(chain[0].subjectAltNameEntries.isEmpty)
    }

    func testOneCertificatePerX509AndTheX509OutlivesItsConnection() throws {
        let table = PeerCertificates()
        var digest: [UInt8] = []
        var address: OpaquePointer?
        do {
            // A connection's own reference to the X509 (as its session holds it) ends here.
            let connection = try fresh(chain[0])
            address = connection.handle
            let first = table.certificate(for: connection.handle)
            XCTAssertTrue(first === table.certificate(for: connection.handle))
            digest = first.publicKeySHA256
        }
        let kept = table.certificate(for: try XCTUnwrap(address))
        XCTAssertEqual(kept.publicKeySHA256, digest)
        XCTAssertEqual(kept.der, chain[0].der, "the table's reference kept the X509 alive")
        XCTAssertEqual(table.count, 1)
    }

    func testAFullTableStartsOver() throws {
        let table = PeerCertificates(limit: 2)
        let certificates = try (chain + chain).map(fresh)  // four distinct X509 objects
        for certificate in certificates { _ = table.certificate(for: certificate.handle) }
        XCTAssertLessThanOrEqual(table.count, 2)
        let last = try XCTUnwrap(certificates.last)
        XCTAssertEqual(table.certificate(for: last.handle).der, last.der)
    }

    func testThreadsThatRaceGetOneValue() throws {
        let certificate = try fresh(chain[0])
        let expected = try fresh(chain[0])
        let results = Locked<[[UInt8]]>([])
        DispatchQueue.concurrentPerform(iterations: 16) { _ in
            let value = certificate.certificateSHA256 + certificate.publicKeySHA256 + Array(certificate.subject.utf8)
            results.withLock { $0.append(value) }
        }
        let wanted = SHA256.hash(expected.der) + SHA256.hash(expected.subjectPublicKeyInfoDER) + Array(expected.subject.utf8)
        XCTAssertEqual(results.withLock { $0 }, Array(repeating: wanted, count: 16))
    }

    func testAMintedLeafIsTheCertificateAsSigned() throws {
        let caKey = try PrivateKey.generateP256()
        let now = Date()
        let ca = try CertificateBuilder.makeCA(commonName: "test CA", key: caKey, notBefore: now, notAfter: now + 3600)
        let leaf = try CertificateBuilder.makeLeaf(for: .dns("api.test"), key: try PrivateKey.generateP256(), issuer: ca,
                                                  issuerKey: caKey, notBefore: now, notAfter: now + 3600)
        // pinproxy keeps a minted leaf as parsed back from its DER (sending it then costs no
        // re-encoding): what a handshake sends is still the certificate as signed, byte for byte.
        XCTAssertEqual(try fresh(leaf).der, leaf.der)
        XCTAssertTrue(leaf.matchesHostName("api.test"))
        XCTAssertEqual(leaf.issuer, ca.subject)
    }
}
