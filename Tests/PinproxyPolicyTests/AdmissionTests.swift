import Foundation
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import XCTest

/// The one admission decision (`Admission.decide`): its rules in order, the same for both
/// listeners, the name binding that asks for the name's resolution and takes it back, the
/// per-client tunnel limit, and how a partly known client fails closed.
final class AdmissionTests: XCTestCase {
    static let config = configuration()

    /// The rules below, under `max_tunnels_per_client = limit` (nil: unlimited).
    static func configuration(limit: Int? = nil) -> Config {
        try! ConfigLoader.load(text: (limit.map { "[proxy]\nmax_tunnels_per_client = \($0)\n\n" } ?? "") + """
        [resolve]
        "pinned-tunnel.test" = "192.0.2.1"

        [hosts."api.test"]
        ports = [443]

        [hosts."denied.test"]
        action = "deny"

        [hosts."tunnel.test"]
        mode = "tunnel"

        [hosts."pinned-tunnel.test"]
        mode = "tunnel"

        [clients."uid:1000"]
        deny = ["api.test"]

        [clients."unknown"]
        allow = ["tunnel.test", "api.test"]

        """, path: "admission.toml", directory: NSTemporaryDirectory())
    }

    static let original = IPAddress("192.0.2.1")!
    static let other = IPAddress("198.51.100.7")!

    private func decide(_ host: String, port: UInt16 = 443, route: AdmissionRequest.Route = .connect, client: ClientIdentity? = .remote,
                        held: Int = 0, limit: Int? = nil, resolution: [IPAddress]? = nil) -> Admission.Decision {
        let request = AdmissionRequest(host: TargetHost(host)!, port: port, route: route, client: client, clientKey: .unknown, clientTunnels: held)
        return Admission.decide(request, config: limit.map { Self.configuration(limit: $0) } ?? Self.config, at: Date(), resolution: resolution)
    }

    private func reason(_ decision: Admission.Decision) -> RefusalReason? {
        if case .refuse(let refusal) = decision { return refusal.reason }
        return nil
    }

    func testTheRulesComeInOrderClientHostPortLimit() {
        let alice = ClientIdentity.local(LocalClient(uid: 1000))
        // client-denied first, even for a denied host.
        XCTAssertEqual(reason(decide("api.test", client: alice)), .clientDenied)
        XCTAssertEqual(reason(decide("denied.test")), .hostDenied)
        XCTAssertEqual(reason(decide("api.test", port: 8443)), .portDenied)
        XCTAssertEqual(reason(decide("api.test", held: 3, limit: 3)), .clientLimit)
        guard case .admit(_, _, nil) = decide("api.test", held: 2, limit: 3) else { return XCTFail("a CONNECT is admitted, then resolved") }
        // The refusal names the entry and the client's decision: what the line needs.
        guard case .refuse(let refusal) = decide("denied.test") else { return XCTFail() }
        XCTAssertEqual(refusal.entry.name, #"hosts."denied.test""#)
        XCTAssertNotNil(refusal.verdict)
    }

    func testBothListenersTakeTheSameRules() {
        let transparent = AdmissionRequest.Route.transparent(original: Self.original, hidesName: false)
        XCTAssertEqual(reason(decide("denied.test", route: transparent)), .hostDenied)
        XCTAssertEqual(reason(decide("api.test", port: 8443, route: transparent)), .portDenied)
        XCTAssertEqual(reason(decide("api.test", route: transparent, held: 1, limit: 1)), .clientLimit)
        guard case .admit(_, _, let addresses) = decide("api.test", route: transparent) else { return XCTFail() }
        XCTAssertEqual(addresses, [Self.original], "a transparent client's upstream is its original destination")
    }

    func testATunnelsNameIsBoundToItsResolutionGivenBack() {
        let transparent = AdmissionRequest.Route.transparent(original: Self.original, hidesName: false)
        guard case .resolve("tunnel.test", _, _) = decide("tunnel.test", route: transparent) else { return XCTFail("the name's resolution is asked for") }
        guard case .admit(_, _, let addresses) = decide("tunnel.test", route: transparent, resolution: [Self.other, Self.original]) else { return XCTFail() }
        XCTAssertEqual(addresses, [Self.original])
        XCTAssertEqual(reason(decide("tunnel.test", route: transparent, resolution: [Self.other])), .destinationMismatch)
        // [resolve] answers without a lookup.
        guard case .admit = decide("pinned-tunnel.test", route: transparent) else { return XCTFail() }
        // A ClientHello that hides its name is refused before any lookup.
        XCTAssertEqual(reason(decide("tunnel.test", route: .transparent(original: Self.original, hidesName: true))), .destinationMismatch)
    }

    func testAPartlyKnownClientAnswersToItsOwnSectionsAndToTheUnknownOne() {
        let partly = ClientIdentity.partlyKnown(LocalClient(uid: 1000), missing: "the unit was not found in time")
        // Its uid's section denies api.test, which the unknown clients' section allows: refused.
        XCTAssertEqual(reason(decide("api.test", client: partly)), .clientDenied)
        // The unknown clients' section does not allow denied-elsewhere hosts: refused.
        XCTAssertEqual(reason(decide("pinned-tunnel.test", client: partly)), .clientDenied)
        // Allowed by both.
        guard case .admit(_, let client, _) = decide("tunnel.test", client: partly) else { return XCTFail() }
        XCTAssertEqual(client.sections, ["uid:1000", "unknown"])
        // Without a [clients."unknown"] section, a partly known client is refused.
        let rules = ClientRules(sections: [ClientSection(selector: .uid(1000), key: "uid:1000", line: 1, allow: nil, deny: [], enforce: true)])
        XCTAssertEqual(ClientPolicy.decide(host: TargetHost("api.test")!, identity: partly, rules: rules).outcome, .refuse)
        XCTAssertEqual(ClientPolicy.decide(host: TargetHost("api.test")!, identity: .local(LocalClient(uid: 1000)), rules: rules).outcome, .allow)
    }

    func testAClientIsItsUIDItsAddressOrTheUnknownBucket() {
        let address = IPAddress("203.0.113.9")!
        XCTAssertEqual(ClientKey(identity: .local(LocalClient(uid: 7)), address: address), .uid(7))
        XCTAssertEqual(ClientKey(identity: .partlyKnown(LocalClient(uid: 7), missing: "-"), address: address), .uid(7))
        XCTAssertEqual(ClientKey(identity: .remote, address: address), .address(address))
        XCTAssertEqual(ClientKey(identity: .unknown(why: "-"), address: address), .unknown)
        XCTAssertEqual(ClientKey(identity: .unknown(why: "other"), address: IPAddress("127.0.0.1")!), .unknown)
    }
}
