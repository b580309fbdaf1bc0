import Foundation
import PinproxyCore
import PinproxyInterop
@testable import PinproxyPolicy
import XCTest

/// `[clients."net:CIDR"]`: the networks as written, which addresses they hold, how forwarded
/// clients meet the other sections, and the loader's `FILE:LINE` errors.
final class ClientNetworkTests: XCTestCase {
    private func network(_ text: String) -> ClientNetwork {
        guard case .success(let network) = ClientNetwork.parse(text) else { fatalError("not a network: \(text)") }
        return network
    }

    private func forwarded(_ text: String) -> ClientIdentity { .forwarded(IPAddress(text)!) }

    func testNetworksAsWritten() {
        for (text, shown) in [("172.17.0.0/16", "172.17.0.0/16"), ("10.0.0.5/32", "10.0.0.5/32"), ("0.0.0.0/0", "0.0.0.0/0"),
                              ("fd00:d0c::/64", "fd00:d0c::/64"), ("FD00:D0C:0::/48", "fd00:d0c::/48"), ("::/0", "::/0"),
                              ("2001:db8::1/128", "2001:db8::1/128"), ("10.1.2.128/25", "10.1.2.128/25")] {
            XCTAssertEqual(network(text).description, shown, text)
            XCTAssertEqual(try? ClientSelectorText.parse("net:" + text).get(), .network(network(text)), text)
        }
        let problems: [(String, String)] = [
            ("172.17.0.1/16", "net:172.17.0.1/16: 172.17.0.1 has host bits set below the /16 prefix: write net:172.17.0.0/16"),
            ("fd00:d0c::1/64", "net:fd00:d0c::1/64: fd00:d0c::1 has host bits set below the /64 prefix: write net:fd00:d0c::/64"),
            ("10.1.2.200/25", "net:10.1.2.200/25: 10.1.2.200 has host bits set below the /25 prefix: write net:10.1.2.128/25"),
            ("172.17.0.0/33", "net:172.17.0.0/33: the prefix length must be a number from 0 to 32 for an IPv4 network"),
            ("::/129", "net:::/129: the prefix length must be a number from 0 to 128 for an IPv6 network"),
            ("172.17.0.0/016", "net:172.17.0.0/016: the prefix length must be a number from 0 to 32 for an IPv4 network"),
            ("172.17.0.0/", "net:172.17.0.0/: the prefix length must be a number from 0 to 32 for an IPv4 network"),
            ("172.17.0.0/-1", "net:172.17.0.0/-1: the prefix length must be a number from 0 to 32 for an IPv4 network"),
        ]
        for (text, message) in problems {
            guard case .failure(let problem) = ClientNetwork.parse(text) else { XCTFail("parsed: \(text)"); continue }
            XCTAssertEqual(problem.message, message, text)
        }
        for text in ["172.17.0.0", "docker0", "172.17.0/16", "172.17.0.0/16/1", "", "/16", "example.com/24"] {
            guard case .failure(let problem) = ClientNetwork.parse(text) else { XCTFail("parsed: \(text)"); continue }
            XCTAssertEqual(problem.message, "net: takes a network as ADDRESS/LENGTH, such as net:172.17.0.0/16 or net:fd00:d0c::/64", text)
        }
    }

    func testWhichAddressesANetworkHolds() {
        let docker = network("172.17.0.0/16")
        XCTAssertTrue(docker.contains(IPAddress("172.17.0.2")!))
        XCTAssertTrue(docker.contains(IPAddress("172.17.255.255")!))
        XCTAssertTrue(docker.contains(IPAddress("::ffff:172.17.0.2")!), "an IPv4-mapped source is its IPv4 address")
        XCTAssertFalse(docker.contains(IPAddress("172.18.0.2")!))
        XCTAssertFalse(docker.contains(IPAddress("fd00::ac11:2")!))
        let half = network("10.1.2.128/25")
        XCTAssertTrue(half.contains(IPAddress("10.1.2.128")!))
        XCTAssertTrue(half.contains(IPAddress("10.1.2.255")!))
        XCTAssertFalse(half.contains(IPAddress("10.1.2.127")!))
        let pods = network("fd00:d0c::/64")
        XCTAssertTrue(pods.contains(IPAddress("fd00:d0c::42")!))
        XCTAssertFalse(pods.contains(IPAddress("fd00:d0c:0:1::42")!))
        XCTAssertFalse(pods.contains(IPAddress("172.17.0.2")!))
        XCTAssertTrue(network("0.0.0.0/0").contains(IPAddress("203.0.113.9")!))
        XCTAssertFalse(network("0.0.0.0/0").contains(IPAddress("::1")!))
        XCTAssertTrue(network("::/0").contains(IPAddress("2001:db8::1")!))
    }

    /// A forwarded client is named by the `net:` sections holding its address, each applying as
    /// any section does; it is never `remote`, and no uid, unit or program section names it.
    func testForwardedClientsMeetNetSectionsOnly() {
        let rules = ClientRules(sections: [
            ClientRulesTests.section("remote", .remote, allow: []),
            ClientRulesTests.section("uid:0", .uid(0), allow: []),
            ClientRulesTests.section("unknown", .unknown, allow: []),
            ClientRulesTests.section("net:172.17.0.0/16", .network(network("172.17.0.0/16")), allow: ["api.example.com", "billing.example.com"]),
            ClientRulesTests.section("net:172.17.0.3/32", .network(network("172.17.0.3/32")), deny: ["billing.example.com"], enforce: false),
            ClientRulesTests.section("net:172.18.0.0/16", .network(network("172.18.0.0/16")), allow: []),
            ClientRulesTests.section("net:fd00:d0c::/64", .network(network("fd00:d0c::/64")), allow: ["api.example.com"]),
        ])
        func decide(_ identity: ClientIdentity, _ host: String) -> ClientDecision {
            ClientPolicy.decide(host: TargetHost(host)!, identity: identity, rules: rules)
        }
        let web = decide(forwarded("172.17.0.2"), "api.example.com")
        XCTAssertEqual(web.outcome, .allow)
        XCTAssertEqual(web.sections, ["net:172.17.0.0/16"], "not remote, not uid:0, not unknown")
        XCTAssertEqual(web.metricLabel, "net:172.17.0.0/16")
        XCTAssertEqual(web.networkSections, "net:172.17.0.0/16")
        let refused = decide(forwarded("172.17.0.2"), "example.org")
        XCTAssertEqual(refused.outcome, .refuse)
        XCTAssertEqual(refused.detail, #"client forwarded from 172.17.0.2: clients."net:172.17.0.0/16" does not allow example.org"#)
        // Both matching sections apply; the narrower one is report-only.
        let both = decide(forwarded("172.17.0.3"), "billing.example.com")
        XCTAssertEqual(both.sections, ["net:172.17.0.0/16", "net:172.17.0.3/32"])
        XCTAssertEqual(both.outcome, .reportOnly)
        XCTAssertEqual(both.networkSections, "net:172.17.0.0/16,net:172.17.0.3/32")
        // Another container network denied everything.
        let other = decide(forwarded("172.18.0.9"), "api.example.com")
        XCTAssertEqual(other.outcome, .refuse)
        XCTAssertEqual(other.detail, #"client forwarded from 172.18.0.9: clients."net:172.18.0.0/16" allows no host"#)
        XCTAssertEqual(decide(forwarded("fd00:d0c::7"), "api.example.com").outcome, .allow)
        XCTAssertEqual(decide(forwarded("fd00:d0c::7"), "example.org").outcome, .refuse)
        // A forwarded client in no net: section gets the host table, like a local user without one.
        let lan = decide(forwarded("192.168.1.20"), "example.org")
        XCTAssertEqual(lan.outcome, .allow)
        XCTAssertEqual(lan.sections, [])
        XCTAssertEqual(lan.metricLabel, "none")
        XCTAssertNil(lan.networkSections)
        // remote keeps its meaning: net: sections never name a peer that connected directly.
        XCTAssertEqual(decide(.remote, "api.example.com").sections, ["remote"])
        XCTAssertEqual(decide(.remote, "api.example.com").outcome, .refuse)
        XCTAssertEqual(decide(.local(LocalClient(uid: 0)), "api.example.com").sections, ["uid:0"])
    }

    func testNetSectionsLoadAndTheirErrorsAreFileAndLine() throws {
        let config = try ConfigLoader.load(text: """
            [clients."net:172.17.0.0/16"]
            allow = ["api.test"]

            [clients."net:fd00:d0c::/64"]
            deny = ["*.example.com"]
            """, path: "/etc/pinproxy.toml", directory: "/")
        XCTAssertEqual(config.clients.sections.map(\.key), ["net:172.17.0.0/16", "net:fd00:d0c::/64"])
        XCTAssertEqual(config.clients.sections.map(\.line), [1, 4])
        XCTAssertEqual(config.clients.sections[0].selector, .network(network("172.17.0.0/16")))
        let cases: [(String, Int, String)] = [
            ("[clients.\"uid:1\"]\n\n[clients.\"net:172.17.0.1/16\"]\nallow = []\n", 3,
             #"clients."net:172.17.0.1/16": net:172.17.0.1/16: 172.17.0.1 has host bits set below the /16 prefix: write net:172.17.0.0/16"#),
            ("[clients.\"net:172.17.0.0/40\"]\n", 1,
             #"clients."net:172.17.0.0/40": net:172.17.0.0/40: the prefix length must be a number from 0 to 32 for an IPv4 network"#),
            ("[clients.\"net:docker0\"]\n", 1,
             #"clients."net:docker0": net: takes a network as ADDRESS/LENGTH, such as net:172.17.0.0/16 or net:fd00:d0c::/64"#),
        ]
        for (text, line, message) in cases {
            do {
                _ = try ConfigLoader.load(text: text, path: "/etc/p.toml", directory: "/")
                XCTFail("loaded: \(text)")
            } catch {
                XCTAssertEqual(error.diagnostics.map(\.line), [line], text)
                XCTAssertEqual(error.diagnostics.map(\.message), [message], text)
            }
        }
    }
}
