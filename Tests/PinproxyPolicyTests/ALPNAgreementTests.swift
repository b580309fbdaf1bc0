import PinproxyCore
import PinproxyPolicy
import XCTest

/// `ALPNAgreement`: when the client can be given what the upstream negotiated, and what the
/// upstream is offered when it is reopened; `ALPNOffer`'s reading of the wire form.
final class ALPNAgreementTests: XCTestCase {
    private func offer(_ names: String...) -> ALPNOffer {
        ALPNOffer(names.map { ALPNProtocol(bytes: Array($0.utf8))! })
    }

    private let custom = ALPNProtocol(bytes: Array("pinproxy-test/1".utf8))!

    func testCarries() {
        let first = ALPNOffer.upstreamDefault
        let cases: [(upstream: ALPNProtocol?, client: ALPNOffer?, carries: Bool, line: UInt)] = [
            (.h2, offer("h2", "http/1.1"), true, #line),
            (.h2, offer("http/1.1", "h2"), true, #line),
            (.http11, offer("h2", "http/1.1"), true, #line),
            (.h2, offer("grpc-exp", "h2"), true, #line),
            (.h2, offer("http/1.1"), false, #line),
            (.http11, offer("h2"), false, #line),
            (.h2, nil, false, #line),
            (.http11, nil, true, #line),
            (nil, nil, true, #line),
            (nil, offer("h2", "http/1.1"), true, #line),
            (nil, offer("http/1.1"), true, #line),
            (nil, offer("pinproxy-test/1", "http/1.1"), false, #line),
            (custom, offer("pinproxy-test/1"), true, #line),
        ]
        for test in cases {
            XCTAssertEqual(ALPNAgreement.carries(upstream: test.upstream, upstreamOffer: first, clientOffer: test.client), test.carries,
                           "upstream \(test.upstream?.description ?? "none"), client \(test.client?.description ?? "no ALPN")",
                           line: test.line)
        }
    }

    func testReopenOffer() {
        XCTAssertEqual(ALPNAgreement.reopenOffer(for: offer("http/1.1")), offer("http/1.1"))
        XCTAssertEqual(ALPNAgreement.reopenOffer(for: offer("pinproxy-test/1", "h2")), offer("pinproxy-test/1", "h2"))
        XCTAssertEqual(ALPNAgreement.reopenOffer(for: nil), offer("http/1.1"))
    }

    func testWireForm() {
        func read(_ bytes: [UInt8]) -> ALPNOffer? {
            ALPNOffer(wire: bytes)
        }
        XCTAssertEqual(read([2, 0x68, 0x32, 8] + Array("http/1.1".utf8)), offer("h2", "http/1.1"))
        XCTAssertEqual(read(offer("h2", "http/1.1").wire), offer("h2", "http/1.1"))
        XCTAssertNil(read([]), "empty list")
        XCTAssertNil(read([0]), "empty name")
        XCTAssertNil(read([2, 0x68, 0x32, 0]), "empty name after a good one")
        XCTAssertNil(read([3, 0x68, 0x32]), "a name running past the end")
        XCTAssertNil(ALPNProtocol(bytes: []))
        XCTAssertNil(ALPNProtocol(bytes: [UInt8](repeating: 0x61, count: 256)))
    }
}
