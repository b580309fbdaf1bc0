import Foundation
import PinproxyInterop
@testable import PinproxyPolicy
import XCTest

/// `capture.forward_interfaces`: the patterns `check` accepts (never loopback), the listeners
/// it needs, and the egress lock's prerouting, forward and input rules for them.
final class ForwardCaptureTests: XCTestCase {
    var pki: PKI!

    override func setUpWithError() throws {
        pki = try PKI.shared()
    }

    static let listen = "[proxy]\ntransparent_listen = [\"0.0.0.0:8\", \"[::]:8\"]\n"

    func ruleset(_ text: String, ipv6Available: Bool = true) throws -> EgressRuleset {
        let config = try pki.loadConfig(text)
        return try EgressRuleset(capture: config.capture, transparentListen: config.proxy.transparentListen, ipv6Available: ipv6Available,
                                 uid: { CaptureConfigTests.users[$0] })
    }

    func testPatternsAndLoopback() {
        for good in ["docker0", "br-*", "cni*", "podman0", "veth*", "enp0s31f6", "a", "lxcbr0"] {
            XCTAssertNil(ForwardInterface.problem(good), good)
        }
        for loopback in ["lo", "l*", "lo*", "*"] {
            XCTAssertEqual(ForwardInterface.problem(loopback),
                           "\"\(loopback)\" matches the loopback interface lo, which forwards nothing (this host's own traffic is captured in output)")
        }
        for bad in ["", "br-*-x", "*br", "docker 0", "a/b", "averyverylongname", "br\"x", "eth0:1"] {
            XCTAssertTrue(ForwardInterface.problem(bad)?.contains("is not an interface name") == true, bad)
        }
        XCTAssertNil(ForwardInterface.problem("lo0"), "lo0 is not lo")
        XCTAssertTrue(ForwardInterface.matches("br-*", "br-1a2b"))
        XCTAssertFalse(ForwardInterface.matches("br-*", "docker0"))
        XCTAssertFalse(ForwardInterface.matches("docker0", "docker01"))
    }

    func testCheckRejectsLoopbackAndLoopbackListenersAtTheirLine() {
        let errors = pki.configErrors(Self.listen + """
            [capture]
            forward_interfaces = ["docker0",
                                  "lo*",
                                  "br-*x"]
            """)
        XCTAssertEqual(errors.map(\.line), [5, 6], errors.map(\.description).joined(separator: "\n"))
        XCTAssertEqual(errors.map(\.message), [
            #"capture.forward_interfaces: "lo*" matches the loopback interface lo, which forwards nothing (this host's own traffic is captured in output)"#,
            #"capture.forward_interfaces: "br-*x" is not an interface name (at most 15 characters, no spaces, "/", quotes or ":") or a prefix followed by "*""#,
        ])
        let loopbackOnly = pki.configErrors("""
            [proxy]
            transparent_listen = ["127.0.0.1:8", "[::1]:8"]
            [capture]
            forward_interfaces = ["docker0"]
            """)
        XCTAssertEqual(loopbackOnly.map(\.line), [4])
        XCTAssertTrue(loopbackOnly.first?.message.hasPrefix("capture.forward_interfaces needs proxy.transparent_listen on the wildcard addresses") == true,
                      loopbackOnly.first?.message ?? "")
    }

    func testForwardRules() throws {
        let rules = try ruleset(Self.listen + "[capture]\nports = [443, 8443]\nforward_interfaces = [\"docker0\", \"br-*\"]\n")
        let text = rules.text
        XCTAssertTrue(text.contains("""
            \tchain capture_tcp {
            \t\ttype nat hook output priority -100; policy accept;
            \t\tmeta skuid 998 return
            \t\tfib daddr type local return
            \t\tmeta nfproto ipv4 tcp dport { 443, 8443 } redirect to :8
            \t\tmeta nfproto ipv6 tcp dport { 443, 8443 } redirect to :8
            \t}
            """), text)
        XCTAssertTrue(text.contains("""
            \tchain capture_forwarded_tcp {
            \t\ttype nat hook prerouting priority -100; policy accept;
            \t\tiifname "docker0" meta pkttype host fib daddr type local return
            \t\tiifname "br-*" meta pkttype host fib daddr type local return
            \t\tiifname "docker0" meta pkttype host meta nfproto ipv4 tcp dport { 443, 8443 } redirect to :8
            \t\tiifname "docker0" meta pkttype host meta nfproto ipv6 tcp dport { 443, 8443 } redirect to :8
            \t\tiifname "br-*" meta pkttype host meta nfproto ipv4 tcp dport { 443, 8443 } redirect to :8
            \t\tiifname "br-*" meta pkttype host meta nfproto ipv6 tcp dport { 443, 8443 } redirect to :8
            \t}
            \tchain block_forwarded {
            \t\ttype filter hook forward priority 0; policy accept;
            \t\tiifname "docker0" udp dport { 443, 8443 } reject
            \t\tiifname "br-*" udp dport { 443, 8443 } reject
            \t}
            \tchain guard_transparent {
            \t\ttype filter hook input priority 0; policy accept;
            \t\tiif != "lo" meta nfproto ipv4 tcp dport 8 ct status ! dnat drop
            \t\tiif != "lo" meta nfproto ipv6 tcp dport 8 ct status ! dnat drop
            \t}
            }

            """), text)
        XCTAssertEqual(rules.listenerAddresses.map(\.description), ["0.0.0.0:8", "[::]:8"])
        XCTAssertTrue(rules.summary.hasSuffix("; forwarded from docker0, br-*: tcp captured, udp rejected"), rules.summary)
        XCTAssertTrue(rules.summary.hasPrefix("tcp 443,8443 to 0.0.0.0:8 and [::]:8;"), rules.summary)
    }

    func testLocalCaptureAndNoQUICBlockAndNoIPv6() throws {
        let local = try ruleset(Self.listen + "[capture]\nlocal = true\nblock_quic = false\nforward_interfaces = [\"cni*\"]\n").text
        XCTAssertFalse(local.contains("meta pkttype host fib daddr type local return"), local)
        XCTAssertFalse(local.contains("chain block_forwarded"), local)
        XCTAssertTrue(local.contains("\t\tiifname \"cni*\" meta pkttype host meta nfproto ipv4 tcp dport 443 redirect to :8\n"), local)
        let noIPv6 = try ruleset("[proxy]\ntransparent_listen = [\"0.0.0.0:8\"]\n[capture]\nforward_interfaces = [\"docker0\"]\n", ipv6Available: false).text
        XCTAssertFalse(noIPv6.contains("nfproto ipv6 tcp dport 443 redirect"), noIPv6)
        XCTAssertTrue(noIPv6.contains("""
            \t\tiifname "docker0" meta nfproto ipv6 tcp dport 443 reject with tcp reset
            \t\tiifname "docker0" udp dport 443 reject
            """), noIPv6)
        XCTAssertFalse(noIPv6.contains("nfproto ipv6 tcp dport 8 ct status"), noIPv6)
    }

    func testWithoutForwardInterfacesNothingChanges() throws {
        let text = try ruleset(Self.listen).text
        for chain in ["capture_forwarded_tcp", "block_forwarded", "guard_transparent", "prerouting"] {
            XCTAssertFalse(text.contains(chain), text)
        }
    }

    func testTheRulesetNeedsWildcardListeners() throws {
        let capture = { () -> CaptureSettings in var c = CaptureSettings(); c.forwardInterfaces = ["docker0"]; return c }()
        let loopback = [ListenAddress("127.0.0.1:8")!, ListenAddress("[::1]:8")!]
        XCTAssertThrowsError(try EgressRuleset(capture: capture, transparentListen: loopback, uid: { CaptureConfigTests.users[$0] })) { error in
            XCTAssertTrue("\(error)".hasPrefix("capture.forward_interfaces needs proxy.transparent_listen on the wildcard addresses"), "\(error)")
        }
    }
}
