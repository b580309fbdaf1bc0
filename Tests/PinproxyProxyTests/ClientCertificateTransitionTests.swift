import Foundation
import PinproxyCore
import XCTest
import PinproxyInterop
import PinproxyPolicy
@testable import PinproxyProxy

/// An upstream that asks for the entry's client certificate, on the embedded IO: the server is
/// judged when it asks (before anything of the identity is sent), the certificate is presented
/// only when the verdict passed, and the connection goes on with that verdict, not a second one.
final class ClientCertificateTransitionTests: XCTestCase {
    typealias Harness = ConnectionHarness

    /// What www.api.test presents (under the harness's root), and the client certificate its
    /// entry sends: the same leaf and key, written where the config names them.
    static let server = Harness.chain(for: "www.api.test")

    /// www.api.test with a client certificate, pinned to its leaf's key, or to keys it does not
    /// have (`matching` false), enforced or report-only.
    static func config(matching: Bool, enforce: Bool = true) throws -> Config {
        let directory = Harness.pki.directory
        try server.chain.map(\.pem).joined().write(toFile: directory + "/www-chain.pem", atomically: true, encoding: .utf8)
        try server.key.pem.write(toFile: directory + "/www.key", atomically: true, encoding: .utf8)
        chmod(directory + "/www.key", 0o600)
        let leafPin = Pin(digest: server.chain[0].publicKeySHA256).description
        let otherPins = [Pin(digest: Array(repeating: 1, count: 32)).description, Pin(digest: Array(repeating: 2, count: 32)).description]
        let pins = matching ? [leafPin, otherPins[0]] : otherPins
        return try Harness.config("""
            [hosts."www.api.test"]
            trust = ["root-a.pem"]
            require_web_pki_profile = false
            pin = "public-key"
            pins = ["\(pins[0])", "\(pins[1])"]
            enforce = \(enforce)
            client_certificate = "\(directory)/www-chain.pem"
            client_key = "\(directory)/www.key"

            """)
    }

    /// In the upstream handshake to www.api.test under `config`.
    static func handshaking(_ config: Config) -> Harness {
        let harness = Harness(config: config)
        harness.io.presentedChain = server.chain
        harness.connection.start()
        harness.plainClient.receive("CONNECT www.api.test:443 HTTP/1.1\r\nHost: www.api.test:443\r\n\r\n")
        harness.io.lookups.last?.done(.success([IPAddress("198.51.100.7")!]))
        harness.io.dials.last?.work.done(.success(20))
        return harness
    }

    /// The server asks, as OpenSSL's certificate callback would.
    static func ask(_ harness: Harness) -> ClientCertificateAnswer? {
        harness.upstream?.onClientCertificateRequest?()
    }

    func testAServerThatPassesGetsTheCertificateAndTheConnectionKeepsThatVerdict() throws {
        let harness = Self.handshaking(try Self.config(matching: true))
        XCTAssertEqual(harness.state, "upstream-handshake")
        XCTAssertEqual(Self.ask(harness), .present)
        XCTAssertEqual(harness.state, "upstream-handshake")
        // What the server presents now is never judged again: the verdict made when it asked stands.
        harness.upstream?.chain = []
        harness.upstream?.fire(.connected)
        XCTAssertEqual(harness.state, "reading-client-hello")
        XCTAssertEqual(harness.plainClient.text, "HTTP/1.1 200 Connection established\r\n\r\n")
    }

    func testAServerThatFailsGetsNothingAndTheHandshakeEndsWithTheVerdictsReason() throws {
        let harness = Self.handshaking(try Self.config(matching: false))
        XCTAssertEqual(Self.ask(harness), .abortHandshake)
        harness.upstream?.fire(.error)
        let answer = harness.plainClient.text
        XCTAssertTrue(answer.hasPrefix("HTTP/1.1 403 "), answer)
        XCTAssertTrue(answer.contains("Pinproxy-Refusal: pin-mismatch"), answer)
        XCTAssertTrue(answer.contains("client certificate withheld"), answer)
        XCTAssertTrue(harness.upstream?.closed == true)
    }

    func testReportOnlyWithholdsTheCertificateAndGoesOn() throws {
        let harness = Self.handshaking(try Self.config(matching: false, enforce: false))
        XCTAssertEqual(Self.ask(harness), .withhold)
        harness.upstream?.fire(.connected)
        XCTAssertEqual(harness.state, "reading-client-hello")
        XCTAssertEqual(harness.plainClient.text, "HTTP/1.1 200 Connection established\r\nPinproxy-Verdict: would-refuse pin-mismatch\r\n\r\n")
    }

    func testReportOnlyWhoseServerEndsTheHandshakeWithoutTheCertificateIsAHandshakeFailure() throws {
        let harness = Self.handshaking(try Self.config(matching: false, enforce: false))
        XCTAssertEqual(Self.ask(harness), .withhold)
        harness.upstream?.fire(.error)
        let answer = harness.plainClient.text
        XCTAssertTrue(answer.hasPrefix("HTTP/1.1 502 "), answer)
        XCTAssertTrue(answer.contains("Pinproxy-Refusal: handshake-failed"), answer)
        XCTAssertTrue(answer.contains("withheld"), answer)
    }

    /// A server that asks for no certificate is judged once the handshake is done, as before.
    func testAServerThatDoesNotAskIsJudgedAfterTheHandshake() throws {
        let harness = Self.handshaking(try Self.config(matching: false))
        harness.upstream?.fire(.connected)
        XCTAssertTrue(harness.plainClient.text.contains("Pinproxy-Refusal: pin-mismatch"), harness.plainClient.text)
        XCTAssertFalse(harness.plainClient.text.contains("withheld"), harness.plainClient.text)
    }
}
