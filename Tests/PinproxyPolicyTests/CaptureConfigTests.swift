import Foundation
import PinproxyInterop
@testable import PinproxyPolicy
import XCTest

/// `[capture]` and `proxy.transparent_listen`: loading, errors at their line, the warnings
/// `check` prints, and the egress lock's ruleset built from them.
final class CaptureConfigTests: XCTestCase {
    var pki: PKI!

    override func setUpWithError() throws {
        pki = try PKI.shared()
    }

    func testDefaultsWhenNothingIsWritten() throws {
        let config = try pki.loadConfig("[proxy]\nlisten = [\"127.0.0.1:3128\"]\n")
        XCTAssertEqual(config.proxy.transparentListen, [])
        XCTAssertEqual(config.capture, CaptureSettings())
        XCTAssertEqual(config.capture.ports, [443])
        XCTAssertFalse(config.capture.local)
        XCTAssertTrue(config.capture.blockQUIC)
        XCTAssertEqual(config.capture.exemptUsers, ["pinproxy"])
        XCTAssertEqual(config.warnings.map(\.message), [])
    }

    func testEveryKeyIsRead() throws {
        let config = try pki.loadConfig("""
            [proxy]
            transparent_listen = ["127.0.0.1:3129", "[::1]:3130"]
            [capture]
            ports = [8443, 443]
            local = true
            block_quic = false
            exempt_users = ["pinproxy", "root"]
            """)
        XCTAssertEqual(config.proxy.transparentListen.map(\.description), ["127.0.0.1:3129", "[::1]:3130"])
        XCTAssertEqual(config.capture.ports, [443, 8443])
        XCTAssertTrue(config.capture.local)
        XCTAssertFalse(config.capture.blockQUIC)
        XCTAssertEqual(config.capture.exemptUsers, ["pinproxy", "root"])
        XCTAssertTrue(config.capture.isWritten)
    }

    func testErrorsAreAtTheirLine() {
        assertErrors("""
            [proxy]
            allow_ports = [443]
            [capture]
            ports = [443]
            locall = true
            """, [(5, #"unknown key capture.locall (did you mean "local"?)"#)])
        assertErrors("""
            [capture]
            block_quic = "yes"
            ports = [0]
            exempt_users = ["pin proxy"]
            """, [(2, "capture.block_quic must be true or false, not a string"),
                  (3, "capture.ports must hold port numbers from 1 to 65535, and holds 0"),
                  (4, #"capture.exempt_users: "pin proxy" is not a user name (letters, digits, "_", "-" and ".", not starting with "-")"#)])
        assertErrors("""
            [proxy]
            transparent_listen = ["localhost:3129"]
            """, [(2, #"proxy.transparent_listen: "localhost:3129" is not IP:PORT (for example "127.0.0.1:3128" or "[::1]:3128")"#)])
        assertErrors("capture = 1\n", [(1, "capture must be a table, not an integer")])
    }

    func testWarningsOfAListenerWithoutCaptureAndTheOtherWayRound() {
        assertWarnings("""
            [proxy]
            transparent_listen = ["127.0.0.1:3129"]
            [capture]
            ports = []
            """, [(4, "proxy.transparent_listen is set, but capture.ports is empty: `pinproxy egress` redirects nothing to it")])
        assertWarnings("""
            [proxy]
            allow_ports = [443]
            [capture]
            ports = [443]
            """, [(3, "[capture] names ports, but proxy.transparent_listen is empty: `pinproxy egress apply` has no listener to redirect them to")])
        assertWarnings("""
            [proxy]
            transparent_listen = ["127.0.0.1:3129", "[::1]:3129"]
            [capture]
            exempt_users = []
            """, [(4, "capture.exempt_users is empty: under the egress lock pinproxy's own upstream connections are captured too, and refused (capture-loop)")])
        assertWarnings("""
            [proxy]
            transparent_listen = ["127.0.0.1:3129", "[::1]:3129"]
            """, [])
    }

    // MARK: The ruleset

    static let users: [String: UInt32] = ["pinproxy": 998, "root": 0]

    func ruleset(_ text: String, ipv6Available: Bool = true) throws -> EgressRuleset {
        let config = try pki.loadConfig(text)
        return try EgressRuleset(capture: config.capture, transparentListen: config.proxy.transparentListen, ipv6Available: ipv6Available, uid: { Self.users[$0] })
    }

    func testRulesetForTheDefaults() throws {
        let rules = try ruleset("[proxy]\ntransparent_listen = [\"127.0.0.1:3129\", \"[::1]:3130\"]\n")
        let text = rules.text
        XCTAssertTrue(text.hasPrefix("#!/usr/sbin/nft -f\n"), text)
        // Created, deleted and defined in one transaction: applying twice leaves one table.
        XCTAssertTrue(text.contains("\ntable inet pinproxy\ndelete table inet pinproxy\ntable inet pinproxy {\n"), text)
        XCTAssertTrue(text.contains("\tcomment \"pinproxy egress lock \(rules.fingerprint)\"\n"), text)
        // Captured connections get a conntrack zone of their own before conntrack sees them:
        // never matched to an exempt connection's entry (no NAT) with the same ports.
        XCTAssertTrue(text.contains("""
            \tchain capture_zone {
            \t\ttype filter hook output priority raw; policy accept;
            \t\tmeta skuid 998 return
            \t\tfib daddr type local return
            \t\ttcp dport 443 ct original zone set 61443
            \t}
            \tchain capture_tcp {
            \t\ttype nat hook output priority -100; policy accept;
            \t\tmeta skuid 998 return
            \t\tfib daddr type local return
            \t\tmeta nfproto ipv4 tcp dport 443 redirect to :3129
            \t\tmeta nfproto ipv6 tcp dport 443 redirect to :3130
            \t}
            \tchain block_quic {
            \t\ttype filter hook output priority 0; policy accept;
            \t\tmeta skuid 998 return
            \t\tfib daddr type local return
            \t\tudp dport 443 reject
            \t}
            }

            """), text)
        XCTAssertEqual(rules.summary, "tcp 443 to 127.0.0.1:3129 and [::1]:3130; udp 443 rejected; this host's own addresses not captured; exempt: pinproxy (uid 998)")
    }

    func testRulesetWithLocalTwoUsersSeveralPortsAndNoQUICBlock() throws {
        let rules = try ruleset("""
            [proxy]
            transparent_listen = ["[::1]:3129", "127.0.0.1:3129"]
            [capture]
            ports = [443, 8443]
            local = true
            block_quic = false
            exempt_users = ["root", "pinproxy"]
            """)
        XCTAssertTrue(rules.text.contains("\t\tmeta skuid { 0, 998 } return\n\t\tmeta nfproto ipv4 tcp dport { 443, 8443 } redirect to :3129\n"), rules.text)
        XCTAssertFalse(rules.text.contains("fib daddr"), rules.text)
        XCTAssertFalse(rules.text.contains("block_quic"), rules.text)
        XCTAssertFalse(rules.text.contains("udp dport"), rules.text)
    }

    func testNoExemptUserMeansNoExemption() throws {
        let rules = try ruleset("[proxy]\ntransparent_listen = [\"127.0.0.1:3129\", \"[::1]:3129\"]\n[capture]\nexempt_users = []\n")
        XCTAssertFalse(rules.text.contains("skuid"), rules.text)
    }

    func testRulesetProblems() throws {
        XCTAssertThrowsError(try ruleset("[proxy]\ntransparent_listen = [\"127.0.0.1:3129\"]\n")) { error in
            XCTAssertEqual("\(error)", #"proxy.transparent_listen has no "[::1]:PORT" (IPv6): the egress lock redirects each family to the transparent listener on its loopback address, and a family without one would go out uncaptured"#)
        }
        XCTAssertThrowsError(try ruleset("[proxy]\nlisten = [\"127.0.0.1:3128\"]\n")) { error in
            XCTAssertTrue("\(error)".hasPrefix(#"proxy.transparent_listen has no "127.0.0.1:PORT" (IPv4) and no "[::1]:PORT" (IPv6)"#), "\(error)")
        }
        XCTAssertThrowsError(try ruleset("[proxy]\ntransparent_listen = [\"127.0.0.1:3129\", \"[::1]:3129\"]\n[capture]\nexempt_users = [\"nobody-here\"]\n")) { error in
            XCTAssertTrue("\(error)".hasPrefix(#"capture.exempt_users: there is no user "nobody-here""#), "\(error)")
        }
        XCTAssertThrowsError(try ruleset("[proxy]\ntransparent_listen = [\"127.0.0.1:3129\", \"[::1]:3129\"]\n[capture]\nports = []\n")) { error in
            XCTAssertEqual("\(error)", "capture.ports is empty: the egress lock would capture nothing")
        }
    }

    func testFingerprintChangesWithTheRules() throws {
        let rules = try ruleset("[proxy]\ntransparent_listen = [\"127.0.0.1:8\", \"[::1]:8\"]\n")
        let other = try ruleset("[proxy]\ntransparent_listen = [\"127.0.0.1:8\", \"[::1]:8\"]\n[capture]\nlocal = true\n")
        XCTAssertNotEqual(other.fingerprint, rules.fingerprint)
    }

    /// Where [::1] cannot be bound, the IPv6 listener may be left out: IPv6 to the capture ports
    /// is rejected (TCP and UDP), after the same exemptions, so enabling IPv6 opens no hole.
    func testWithoutIPv6TheRulesetRejectsIPv6() throws {
        let text = "[proxy]\ntransparent_listen = [\"127.0.0.1:8\"]\n[capture]\nports = [443, 8443]\n"
        XCTAssertThrowsError(try ruleset(text, ipv6Available: true))
        let rules = try ruleset(text, ipv6Available: false)
        XCTAssertNil(rules.ipv6Port)
        XCTAssertFalse(rules.text.contains("redirect to :8\n\t\tmeta nfproto ipv6"), rules.text)
        XCTAssertTrue(rules.text.contains("""
            \tchain block_ipv6 {
            \t\ttype filter hook output priority 0; policy accept;
            \t\tmeta skuid 998 return
            \t\tfib daddr type local return
            \t\tmeta nfproto ipv6 tcp dport { 443, 8443 } reject with tcp reset
            \t\tmeta nfproto ipv6 udp dport { 443, 8443 } reject
            \t}

            """), rules.text)
        XCTAssertEqual(rules.summary, "tcp 443,8443 to 127.0.0.1:8; IPv6 to 443,8443 rejected (IPv6 is off on this host); udp 443,8443 rejected; this host's own addresses not captured; exempt: pinproxy (uid 998)")
        XCTAssertEqual(rules.listenerAddresses.map(\.description), ["127.0.0.1:8"])
        // A [::1] listener in the config is not used then (the daemon cannot bind it either).
        let both = try ruleset("[proxy]\ntransparent_listen = [\"127.0.0.1:8\", \"[::1]:8\"]\n", ipv6Available: false)
        XCTAssertTrue(both.text.contains("block_ipv6"), both.text)
        XCTAssertEqual(both.listenerAddresses.map(\.description), ["127.0.0.1:8"])
        let available = try ruleset("[proxy]\ntransparent_listen = [\"127.0.0.1:8\", \"[::1]:8\"]\n", ipv6Available: true)
        XCTAssertFalse(available.text.contains("block_ipv6"), available.text)
        XCTAssertEqual(available.listenerAddresses.map(\.description), ["127.0.0.1:8", "[::1]:8"])
    }

    /// `egress apply` refuses a transparent port at or above ip_unprivileged_port_start, naming it.
    func testTransparentPortMustBePrivileged() throws {
        let rules = try ruleset("[proxy]\ntransparent_listen = [\"127.0.0.1:8\", \"[::1]:3129\"]\n")
        XCTAssertNil(try ruleset("[proxy]\ntransparent_listen = [\"127.0.0.1:8\", \"[::1]:8\"]\n").privilegeProblem(unprivilegedPortStart: 1024))
        XCTAssertNil(try ruleset("[proxy]\ntransparent_listen = [\"127.0.0.1:8\", \"[::1]:8\"]\n").privilegeProblem(unprivilegedPortStart: 9))
        let problem = try XCTUnwrap(rules.privilegeProblem(unprivilegedPortStart: 1024))
        XCTAssertTrue("\(problem)".hasPrefix("the transparent port 3129 is not privileged here: net.ipv4.ip_unprivileged_port_start = 1024"), "\(problem)")
        let lowered = try XCTUnwrap(try ruleset("[proxy]\ntransparent_listen = [\"127.0.0.1:8\", \"[::1]:8\"]\n").privilegeProblem(unprivilegedPortStart: 0))
        XCTAssertTrue("\(lowered)".contains("port 8 is not privileged here: net.ipv4.ip_unprivileged_port_start = 0"), "\(lowered)")
    }

    /// Two `nft -j` listings of the same rules compare equal whatever their handles and nft's
    /// header say; a rule less (a flushed chain) does not.
    func testJSONListingsCompareWithoutHandles() throws {
        let live = #"{"nftables": [{"metainfo": {"version": "1.0.6", "json_schema_version": 1}}, {"table": {"family": "inet", "name": "pinproxy", "handle": 7}}, {"chain": {"family": "inet", "table": "pinproxy", "name": "capture_tcp", "handle": 1, "type": "nat", "hook": "output", "prio": -100, "policy": "accept"}}, {"rule": {"family": "inet", "table": "pinproxy", "chain": "capture_tcp", "handle": 4, "expr": [{"redirect": {"port": 8}}]}}]}"#
        let generated = #"{"nftables": [{"metainfo": {"version": "1.0.9", "json_schema_version": 1}}, {"table": {"name": "pinproxy", "family": "inet", "handle": 1}}, {"chain": {"family": "inet", "table": "pinproxy", "name": "capture_tcp", "handle": 2, "type": "nat", "hook": "output", "prio": -100, "policy": "accept"}}, {"rule": {"family": "inet", "table": "pinproxy", "chain": "capture_tcp", "handle": 3, "expr": [{"redirect": {"port": 8}}]}}]}"#
        let flushed = #"{"nftables": [{"metainfo": {"version": "1.0.6", "json_schema_version": 1}}, {"table": {"family": "inet", "name": "pinproxy", "handle": 7}}, {"chain": {"family": "inet", "table": "pinproxy", "name": "capture_tcp", "handle": 1, "type": "nat", "hook": "output", "prio": -100, "policy": "accept"}}]}"#
        let rules = try XCTUnwrap(EgressRuleset.rules(inJSONListing: live))
        XCTAssertEqual(rules.count, 3)
        XCTAssertEqual(rules, EgressRuleset.rules(inJSONListing: generated))
        XCTAssertNotEqual(rules, EgressRuleset.rules(inJSONListing: flushed))
        XCTAssertNil(EgressRuleset.rules(inJSONListing: "table inet pinproxy {"))
    }

    // MARK: Helpers

    func assertErrors(_ text: String, _ expected: [(Int, String)], file: StaticString = #filePath, line: UInt = #line) {
        let got = pki.configErrors(text, file: file, line: line)
        XCTAssertEqual(got.map(\.line), expected.map(\.0), "errors: \(got.map(\.description))", file: file, line: line)
        XCTAssertEqual(got.map(\.message), expected.map(\.1), file: file, line: line)
    }

    func assertWarnings(_ text: String, _ expected: [(Int, String)], file: StaticString = #filePath, line: UInt = #line) {
        let got = pki.configWarnings(text, file: file, line: line)
        XCTAssertEqual(got.map(\.line), expected.map(\.0), "warnings: \(got.map(\.description))", file: file, line: line)
        XCTAssertEqual(got.map(\.message), expected.map(\.1), file: file, line: line)
    }
}
