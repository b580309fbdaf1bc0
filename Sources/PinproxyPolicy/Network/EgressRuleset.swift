import FoundationEssentials
import PinproxyCore
import PinproxyInterop

/// The egress lock: an nftables ruleset, in its own table `inet pinproxy`, that redirects the
/// host's outgoing TCP to the capture ports to pinproxy's transparent listener (IPv4 to the
/// `127.0.0.1` one, IPv6 to the `[::1]` one), rejects outgoing UDP to them (QUIC) when
/// `block_quic`, leaves this host's own addresses alone unless `local`, and lets the processes
/// of the exempt users (pinproxy's own) go out uncaptured. On a host where `[::1]` cannot be
/// bound (IPv6 off) a config may leave out the IPv6 listener: IPv6 to the capture ports is then
/// rejected, so enabling IPv6 later opens no way around the lock. Pure: the caller resolves the
/// users and says whether IPv6 is available.
///
/// With `forward_interfaces`, the traffic this host forwards from those interfaces (containers,
/// VMs) is captured too: TCP to the capture ports arriving there, routed (addressed to this
/// host at the link layer, so never a frame bridged between two containers of one bridge) and
/// not to this host's own addresses (unless `local`), is redirected in prerouting, which
/// delivers it to the incoming interface's own address: the transparent listeners are then
/// the wildcard addresses (`0.0.0.0`, `[::]`) on the privileged port, and an input rule drops
/// every connection to that port from another interface that the lock did not redirect. UDP to
/// the capture ports from those interfaces is rejected in the forward hook (an ICMP error to
/// the sender) when `block_quic`.
public struct EgressRuleset: Sendable {
    /// The table every rule lives in; nothing else is touched.
    public static let table = "inet pinproxy"

    public let capture: CaptureSettings
    /// The transparent listener ports for IPv4 (`127.0.0.1`) and IPv6 (`[::1]`; nil where IPv6
    /// is off and the config has no IPv6 listener: IPv6 to the capture ports is rejected).
    public let ipv4Port: UInt16
    public let ipv6Port: UInt16?
    /// The transparent listeners' addresses: the loopback ones, or the wildcard ones, which
    /// `forward_interfaces` needs.
    public let ipv4Address: IPAddress
    public let ipv6Address: IPAddress?
    /// The exempt users and their uids, in config order.
    public let exempt: [(name: String, uid: UInt32)]

    /// Why a config has no ruleset.
    public struct Problem: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    /// The ruleset for `capture` redirecting to `transparentListen`, exempting the users
    /// `uid(of:)` resolves; a problem when an address family has no loopback listener (where
    /// `ipv6Available` is false, IPv6 needs none and its listener is not used), nothing is
    /// captured, or an exempt user does not exist.
    public init(capture: CaptureSettings, transparentListen: [ListenAddress], ipv6Available: Bool = true, uid: (String) -> UInt32?) throws(Problem) {
        guard !capture.ports.isEmpty else {
            throw Problem(description: "capture.ports is empty: the egress lock would capture nothing")
        }
        // Without IPv6 the daemon leaves out its [::1] listener too: IPv6 is rejected, not redirected.
        let forwards = !capture.forwardInterfaces.isEmpty
        let v4Addresses = (forwards ? ["0.0.0.0"] : ["127.0.0.1", "0.0.0.0"]).compactMap(IPAddress.init)
        let v6Addresses = (forwards ? ["::"] : ["::1", "::"]).compactMap(IPAddress.init)
        let v6 = ipv6Available ? transparentListen.first(where: { v6Addresses.contains($0.address) }) : nil
        if forwards, !transparentListen.contains(where: { $0.address == v4Addresses[0] }) || (ipv6Available && v6 == nil) {
            throw Problem(description: "capture.forward_interfaces needs proxy.transparent_listen on the wildcard addresses (\"0.0.0.0:PORT\"\(ipv6Available ? " and \"[::]:PORT\"" : ""), the privileged port): forwarded connections are redirected to the address of the interface they arrive on")
        }
        guard let v4 = transparentListen.first(where: { v4Addresses.contains($0.address) }),
              v6 != nil || !ipv6Available else {
            let missing = [transparentListen.contains { $0.address == IPAddress("127.0.0.1") } ? nil : "\"127.0.0.1:PORT\" (IPv4)",
                           transparentListen.contains { $0.address == IPAddress("::1") } ? nil : "\"[::1]:PORT\" (IPv6)"]
            throw Problem(description: "proxy.transparent_listen has no \(missing.compactMap { $0 }.joined(separator: " and no ")): the egress lock redirects each family to the transparent listener on its loopback address, and a family without one would go out uncaptured")
        }
        var exempt: [(String, UInt32)] = []
        for name in capture.exemptUsers {
            guard let id = uid(name) else {
                throw Problem(description: "capture.exempt_users: there is no user \"\(name)\" (create it, e.g. `useradd --system \(name)`, or list the user pinproxy runs as)")
            }
            exempt.append((name, id))
        }
        self.capture = capture
        self.ipv4Port = v4.port
        self.ipv6Port = v6?.port
        self.ipv4Address = v4.address
        self.ipv6Address = v6?.address
        self.exempt = exempt
    }

    /// The transparent listeners the rules redirect to.
    public var listenerAddresses: [SocketAddress] {
        var addresses = [SocketAddress(address: ipv4Address, port: ipv4Port)]
        if let ipv6Address, let ipv6Port { addresses.append(SocketAddress(address: ipv6Address, port: ipv6Port)) }
        return addresses
    }

    /// The conntrack zone of the captured connections' original direction (`capture_zone`,
    /// before conntrack): conntrack decides NAT at a connection's first packet only, so a
    /// captured connection matched to the entry of an earlier exempt one with the same
    /// addresses and ports (the kernel gives a source port out again as soon as no socket holds
    /// it; an entry that ended in a reset stays 10 s and takes no SYN as a new connection) would
    /// go out unredirected. In a zone of their own they never meet the exempt connections'
    /// entries, nor these theirs; replies are looked up in the default zone as before.
    public static let captureZone: UInt16 = 61443

    /// One line saying what is captured.
    public var summary: String {
        let ports = capture.ports.map(String.init).joined(separator: ",")
        let listeners = listenerAddresses
        var parts = [listeners.count == 2 ? "tcp \(ports) to \(listeners[0]) and \(listeners[1])"
                     : "tcp \(ports) to \(listeners[0]); IPv6 to \(ports) rejected (IPv6 is off on this host)"]
        parts.append(capture.blockQUIC ? "udp \(ports) rejected" : "udp \(ports) not blocked")
        parts.append(capture.local ? "this host's own addresses captured too" : "this host's own addresses not captured")
        parts.append(exempt.isEmpty ? "no user exempt" : "exempt: " + exempt.map { "\($0.name) (uid \($0.uid))" }.joined(separator: ", "))
        if !capture.forwardInterfaces.isEmpty {
            parts.append("forwarded from " + capture.forwardInterfaces.joined(separator: ", ") + ": tcp captured" + (capture.blockQUIC ? ", udp rejected" : ""))
        }
        return parts.joined(separator: "; ")
    }

    /// The whole `nft -f` input: the table is created (so that the next line cannot fail),
    /// deleted and defined again in one transaction, so applying it twice leaves one copy. The
    /// table's comment carries `fingerprint`, for `pinproxy egress status`.
    public var text: String {
        let (head, body) = parts
        return head + "\tcomment \"\(Self.commentPrefix)\(Self.fingerprint(body))\"\n" + body
    }

    /// What the table's comment starts with; the fingerprint follows.
    public static let commentPrefix = "pinproxy egress lock "

    /// The first 16 hex digits of the rules' SHA-256: which ruleset a live table holds.
    public var fingerprint: String { Self.fingerprint(parts.body) }

    private static func fingerprint(_ body: String) -> String {
        SHA256.hash(Array(body.utf8)).prefix(8).map { $0.hex(digits: 2) }.joined()
    }

    /// The text up to the table's opening brace, and the chains to its end.
    private var parts: (head: String, body: String) {
        let ports = capture.ports.count == 1 ? String(capture.ports[0]) : "{ " + capture.ports.map(String.init).joined(separator: ", ") + " }"
        let uids = exempt.count == 1 ? String(exempt[0].uid) : "{ " + exempt.map { String($0.uid) }.joined(separator: ", ") + " }"
        var skip: [String] = []
        if !exempt.isEmpty { skip.append("meta skuid \(uids) return") }
        if !capture.local { skip.append("fib daddr type local return") }
        var lines = [
            "#!/usr/sbin/nft -f",
            "# pinproxy egress lock: \(summary).",
            "# Applied by `pinproxy egress apply`, lifted by `pinproxy egress remove` (only this table).",
            "table \(Self.table)",
            "delete table \(Self.table)",
            "table \(Self.table) {",
        ]
        let head = lines.joined(separator: "\n") + "\n"
        lines = ["\tchain capture_zone {", "\t\ttype filter hook output priority raw; policy accept;"]
        lines += skip.map { "\t\t\($0)" }
        lines += ["\t\ttcp dport \(ports) ct original zone set \(Self.captureZone)", "\t}"]
        lines += [
            "\tchain capture_tcp {",
            "\t\ttype nat hook output priority -100; policy accept;",
        ]
        lines += skip.map { "\t\t\($0)" }
        lines.append("\t\tmeta nfproto ipv4 tcp dport \(ports) redirect to :\(ipv4Port)")
        if let ipv6Port { lines.append("\t\tmeta nfproto ipv6 tcp dport \(ports) redirect to :\(ipv6Port)") }
        lines.append("\t}")
        if ipv6Port == nil {
            lines += ["\tchain block_ipv6 {", "\t\ttype filter hook output priority 0; policy accept;"]
            lines += skip.map { "\t\t\($0)" }
            lines += ["\t\tmeta nfproto ipv6 tcp dport \(ports) reject with tcp reset", "\t\tmeta nfproto ipv6 udp dport \(ports) reject", "\t}"]
        }
        if capture.blockQUIC {
            lines += ["\tchain block_quic {", "\t\ttype filter hook output priority 0; policy accept;"]
            lines += skip.map { "\t\t\($0)" }
            lines += ["\t\tudp dport \(ports) reject", "\t}"]
        }
        lines += forwardChains(ports)
        lines.append("}")
        return (head, lines.joined(separator: "\n") + "\n")
    }

    /// The chains for `forward_interfaces`, one rule per interface pattern: redirect in
    /// prerouting (`meta pkttype host`: only frames addressed to this host, which routes them;
    /// a frame bridged between two ports of one bridge, seen here under `br_netfilter`, is
    /// another host's), the rejection of UDP in the forward hook, and the input rule that drops
    /// connections to the transparent port from other interfaces that were not redirected.
    private func forwardChains(_ ports: String) -> [String] {
        let interfaces = capture.forwardInterfaces.map { "iifname \"\($0)\" meta pkttype host" }
        guard !interfaces.isEmpty else { return [] }
        var lines = ["\tchain capture_forwarded_tcp {", "\t\ttype nat hook prerouting priority -100; policy accept;"]
        if !capture.local { lines += interfaces.map { "\t\t\($0) fib daddr type local return" } }
        for interface in interfaces {
            lines.append("\t\t\(interface) meta nfproto ipv4 tcp dport \(ports) redirect to :\(ipv4Port)")
            if let ipv6Port { lines.append("\t\t\(interface) meta nfproto ipv6 tcp dport \(ports) redirect to :\(ipv6Port)") }
        }
        lines.append("\t}")
        let forwarded = capture.forwardInterfaces.map { "iifname \"\($0)\"" }
        if ipv6Port == nil || capture.blockQUIC {
            lines += ["\tchain block_forwarded {", "\t\ttype filter hook forward priority 0; policy accept;"]
            for interface in forwarded {
                if ipv6Port == nil { lines.append("\t\t\(interface) meta nfproto ipv6 tcp dport \(ports) reject with tcp reset") }
                if capture.blockQUIC { lines.append("\t\t\(interface) udp dport \(ports) reject") }
            }
            lines.append("\t}")
        }
        lines += ["\tchain guard_transparent {", "\t\ttype filter hook input priority 0; policy accept;",
                  "\t\tiif != \"lo\" meta nfproto ipv4 tcp dport \(ipv4Port) ct status ! dnat drop"]
        if let ipv6Port { lines.append("\t\tiif != \"lo\" meta nfproto ipv6 tcp dport \(ipv6Port) ct status ! dnat drop") }
        lines.append("\t}")
        return lines
    }

    /// A problem when a transparent port is not privileged in a namespace whose
    /// `net.ipv4.ip_unprivileged_port_start` is `start` (it applies to IPv6 too): any user could
    /// then bind it while pinproxy is not listening, and receive every redirected connection.
    public func privilegeProblem(unprivilegedPortStart start: Int) -> Problem? {
        let ports = Set([ipv4Port] + (ipv6Port.map { [$0] } ?? []))
        guard let port = ports.sorted().first(where: { Int($0) >= start }) else { return nil }
        return Problem(description: "the transparent port \(port) is not privileged here: net.ipv4.ip_unprivileged_port_start = \(start), so any user could listen on it while pinproxy is stopped and receive every redirected connection. Choose a proxy.transparent_listen port below \(start) (the default is 8), or raise the sysctl")
    }

    /// The `nft -f` input that lifts the lock: the table is created if missing, then deleted,
    /// so that removing twice is no error; no other table is touched.
    public static let removal = "table \(table)\ndelete table \(table)\n"

    /// The objects of an `nft -j list table` output (the table, its chains and rules) in
    /// order, each as canonical JSON without the kernel's `handle` numbers and without the
    /// `metainfo` object: two listings of the same rules read the same, whichever namespace they
    /// were loaded in and whichever `nft` version's header they carry. Nil when `json` is not an
    /// `nft -j` listing.
    public static func rules(inJSONListing json: String) -> [String]? {
        guard let document = try? JSONDecoder().decode(JSONValue.self, from: Data(json.utf8)),
              let objects = document["nftables"]?.array else { return nil }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var rules: [String] = []
        for object in objects {
            guard object.object != nil else { return nil }
            if object["metainfo"] != nil { continue }
            guard let data = try? encoder.encode(withoutHandles(object)) else { return nil }
            rules.append(String(decoding: data, as: UTF8.self))
        }
        return rules
    }

    private static func withoutHandles(_ value: JSONValue) -> JSONValue {
        switch value {
        case .object(let members): return .object(members.filter { $0.key != "handle" }.mapValues(withoutHandles))
        case .array(let elements): return .array(elements.map(withoutHandles))
        default: return value
        }
    }
}
