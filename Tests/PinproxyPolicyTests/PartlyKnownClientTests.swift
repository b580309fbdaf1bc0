import PinproxyPolicy
import XCTest

/// A local client whose unit could not be told (`CgroupUnit.unknown`) is partly known, and fails
/// closed: it never gets more than `[clients."unknown"]` and every section it may belong to.
final class PartlyKnownClientTests: XCTestCase {
    static func section(_ key: String, _ selector: ClientSelector, allow: [String]? = nil, deny: [String] = []) -> ClientSection {
        ClientSection(selector: selector, key: key, line: 0, allow: allow?.map { HostPattern($0)! }, deny: deny.map { HostPattern($0)! }, enforce: true)
    }

    static let rules = ClientRules(sections: [
        section("unit:ci.service", .unit("ci.service"), allow: ["github.test", "pypi.test"]),
        section("unit:backup.service", .unit("backup.service"), allow: ["backup.test", "pypi.test", "github.test"]),
        section("uid:1000", .uid(1000), deny: ["github.test"]),
        section("uid:2000", .uid(2000), allow: []),
        section("unknown", .unknown, allow: ["pypi.test", "github.test", "other.test"]),
    ])

    static let unknown = ClientIdentity.unknown(why: "uid 1000: its unit cannot be told: cgroup 9 vanished")

    func decide(_ host: String, partly: LocalClient?, rules: ClientRules = rules) -> ClientDecision {
        let identity = partly.map { ClientIdentity.partlyKnown($0, missing: "its unit cannot be told: cgroup 9 vanished") } ?? Self.unknown
        return ClientPolicy.decide(host: TargetHost(host)!, identity: identity, rules: rules)
    }

    func testEverySectionItMayBelongToApplies() {
        let partly = LocalClient(uid: 1000, user: "alice")
        // pypi.test: allowed by unknown, by every unit: section, not denied by uid:1000.
        let allowed = decide("pypi.test", partly: partly)
        XCTAssertEqual(allowed.outcome, .allow)
        XCTAssertEqual(allowed.sections, ["unit:ci.service", "unit:backup.service", "uid:1000", "unknown"])
        // other.test: the unknown section alone would allow it; the units it may be in do not.
        let other = decide("other.test", partly: partly)
        XCTAssertEqual(other.outcome, .refuse)
        XCTAssertTrue(other.detail.contains(#"clients."unit:ci.service" does not allow other.test"#), other.detail)
        XCTAssertTrue(other.detail.contains("cgroup 9 vanished"), "the line says why: \(other.detail)")
        // github.test: its uid's section denies it.
        XCTAssertEqual(decide("github.test", partly: partly).outcome, .refuse)
        // Without the uid known, the unknown section alone decides, as for any unknown client.
        XCTAssertEqual(decide("other.test", partly: nil).outcome, .allow)
    }

    func testWithoutAnUnknownSectionItIsRefused() {
        let rules = ClientRules(sections: [Self.section("uid:1000", .uid(1000))])
        let decision = decide("pypi.test", partly: LocalClient(uid: 1000), rules: rules)
        XCTAssertEqual(decision.outcome, .refuse)
        XCTAssertTrue(decision.detail.contains("an unknown client is refused"), decision.detail)
    }

    func testAKnownClientIsDecidedAsBefore() {
        let ci = ClientPolicy.decide(host: TargetHost("pypi.test")!, identity: .local(LocalClient(uid: 2000, unit: "ci.service")),
                                     rules: Self.rules)
        XCTAssertEqual(ci.outcome, .refuse, "uid:2000 allows nothing")
        let backup = ClientPolicy.decide(host: TargetHost("backup.test")!, identity: .local(LocalClient(uid: 3000, unit: "backup.service")),
                                         rules: Self.rules)
        XCTAssertEqual(backup.outcome, .allow)
    }
}
