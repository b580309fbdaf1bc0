import Foundation
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import XCTest
@testable import PinproxyProxy

/// On the transparent listener, an entry whose admission does not authenticate the name
/// (`NameAuthentication`) waits for the name's addresses before any connect, as a tunnel does;
/// one that does goes straight to its connect.
final class NameBindingTransitionTests: XCTestCase {
    static let original = SocketAddress(address: IPAddress("198.51.100.7")!, port: 443)

    func transparent(_ host: String) throws -> ConnectionHarness {
        let harness = ConnectionHarness(config: try ConnectionHarness.config(), listener: .transparent)
        harness.connection.startTransparent(ConnectionHarness.notRedirected)
        let hello = ClientHello(alpn: ALPNOffer([.http11]), serverName: host, offersEncryptedClientHello: false)
        harness.connection.identifyClient(.transparent(host: TargetHost(host)!, original: Self.original, hello: hello))
        return harness
    }

    func testAnAllowInsecureNameIsBoundToItsAddresses() throws {
        let elsewhere = try transparent("insecure.test")
        XCTAssertEqual(elsewhere.state, "binding-tunnel")
        XCTAssertTrue(elsewhere.io.dials.isEmpty, "connected before the name was bound")
        elsewhere.io.lookups.last?.done(.success([IPAddress("203.0.113.9")!]))
        XCTAssertEqual(elsewhere.state, "refusing-in-tls")
        XCTAssertTrue(elsewhere.io.dials.isEmpty, "connected to an address the name does not resolve to")

        let there = try transparent("insecure.test")
        there.io.lookups.last?.done(.success([IPAddress("203.0.113.9")!, Self.original.address]))
        XCTAssertEqual(there.state, "transparent-connecting")
    }

    func testAVerifiedNameIsNotBound() throws {
        let harness = try transparent("api.test")
        XCTAssertEqual(harness.state, "transparent-connecting")
        XCTAssertTrue(harness.io.lookups.isEmpty)
    }
}
