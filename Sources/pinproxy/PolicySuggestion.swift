import FoundationEssentials
import PinproxyPolicy
import PinproxyCore

/// What `pinproxy suggest` learns per host from decision lines: every distinct public key on
/// the paths the daemon verified (`verified_pins`: leaf and intermediates, not the anchor), and
/// when. What a server presented off that path is never learned.
struct PolicySuggestion {
    /// One key seen in one chain position.
    struct Key {
        let pin: Pin
        var subject: String
        /// 0 for a leaf, 1 and up for intermediates (the smallest position it was seen at).
        var position: Int
        var connections: Int
        var lastSeen: String
    }

    /// Everything seen of one host.
    struct Host {
        let name: String
        var connections = 0
        var firstSeen = ""
        var lastSeen = ""
        var ports: Set<UInt16> = []
        var entries: Set<String> = []
        var keys: [Pin: Key] = [:]
    }

    private(set) var hosts: [String: Host] = [:]
    /// Connection lines passed over because their chain was not verified (refused, allowed
    /// without a check, or without `verified_pins`), by why.
    private(set) var skipped: [String: Int] = [:]

    /// Why a line of a learnable outcome without `verified_pins` is skipped.
    static let noVerifiedPins = "no verified_pins (a line of an older pinproxy, or no path was verified)"

    /// Learns from one decision line. Only paths the daemon verified count: `allowed` lines
    /// of checked entries, and report-only lines refused for a pin or revocation status alone,
    /// each through its `verified_pins` (never its presented chain).
    mutating func learn(_ decision: DecisionLogReader.Decision) {
        if let why = Self.unverifiedReason(decision) {
            skipped[why, default: 0] += 1
            return
        }
        guard let verified = decision.verifiedPins else {
            skipped[Self.noVerifiedPins, default: 0] += 1
            return
        }
        let name = HostPattern(decision.host)?.description ?? decision.host
        var host = hosts[name] ?? Host(name: name)
        host.connections += 1
        let day = String(decision.time.prefix(10))
        if !day.isEmpty {
            if host.firstSeen.isEmpty || day < host.firstSeen { host.firstSeen = day }
            if day > host.lastSeen { host.lastSeen = day }
        }
        host.ports.insert(decision.port)
        host.entries.insert(decision.entry)
        // The path ends at its anchor, which is not pinned, unless it issued the leaf: a pin set
        // must hold the issuing CA's key (the leaf's next key is unknown), anchor or not.
        for (position, pin) in verified.prefix(max(2, verified.count - 1)).enumerated() {
            let subject = decision.subjects[pin] ?? "subject not named on the line"
            var key = host.keys[pin] ?? Key(pin: pin, subject: subject, position: position, connections: 0, lastSeen: day)
            key.connections += 1
            key.position = min(key.position, position)
            if day >= key.lastSeen { key.lastSeen = day; key.subject = subject }
            host.keys[pin] = key
        }
        hosts[name] = host
    }

    /// Why a line's chain cannot be learned from, or nil when it can.
    static func unverifiedReason(_ decision: DecisionLogReader.Decision) -> String? {
        switch decision.outcome {
        case "allowed":
            if decision.detail.contains("allow-insecure") { return "allow-insecure (no check was made)" }
            if decision.detail.contains("trust = \"none\"") { return "trust = \"none\" (the chain was not verified)" }
            return nil
        case "report-only":
            // Since report-only relaxes only pins and revocation status, such a chain was verified
            // and named the host; anything else (an older daemon's log) is not learned from.
            let learnable: Set<String> = ["pin-mismatch", "revocation-unknown"]
            if let reason = decision.reason, learnable.contains(reason),
               !["untrusted-chain", "certificate-expired", "certificate-not-yet-valid", "hostname-mismatch", "revoked"]
                .contains(where: decision.detail.contains) {
                return nil
            }
            return "report-only \(decision.reason ?? "-")"
        default:
            return "\(decision.outcome) \(decision.reason ?? "-")"
        }
    }

    /// The hosts to print, by name: those seen on at least `minConnections` connections and
    /// matching `pattern` (when given).
    func selected(minConnections: Int, pattern: HostPattern?) -> [Host] {
        hosts.values
            .filter { $0.connections >= minConnections }
            .filter { host in pattern.map { Self.pattern($0, matches: host.name) } ?? true }
            .sorted { $0.name < $1.name }
    }

    static func pattern(_ pattern: HostPattern, matches name: String) -> Bool {
        switch pattern {
        case .exact(let exact): return name == exact
        case .ip(let address): return name == address.description
        case .wildcard(let parent):
            guard name.hasSuffix("." + parent) else { return false }
            return !name.dropLast(parent.count + 1).contains(".")
        }
    }

    /// A `[hosts."NAME"]` block that pins every key learned for `host`, leaf keys first, with
    /// the other keys (`trust`, `ports`, ...) of `entry`, the entry `config` applies to the host
    /// (nil: nothing but the ports). A pin set of leaf keys alone gets a marked backup slot.
    static func render(_ host: Host, entry: PolicyEntry? = nil, allowPorts: Set<UInt16> = [443]) -> String {
        let keys = host.keys.values.sorted { ($0.position, -$0.connections, $0.pin.description) < ($1.position, -$1.connections, $1.pin.description) }
        let leaves = keys.filter { $0.position == 0 }.count
        var lines: [String] = []
        let span = host.firstSeen == host.lastSeen ? "on \(host.firstSeen)" : "from \(host.firstSeen) to \(host.lastSeen)"
        lines.append("# \(host.name): \(host.connections) verified connection(s) \(span); \(leaves) leaf key(s), \(keys.count - leaves) intermediate key(s)")
        lines.append("# learned under: \(host.entries.sorted().map(comment).joined(separator: ", "))")
        var before: [String] = [], after: [String] = []
        let ports = Set(host.ports)
        if let entry, let target = TargetHost(host.name) {
            if entry.pattern != nil { lines.append("# replaces \(entry.name)" + (entry.line > 0 ? " (line \(entry.line))" : "")) }
            switch entry.policy.trust {
            case .anchors, .systemAndListed: before += entry.written.trust.map { ["trust = \(SuggestedEntry.list($0))"] } ?? []
            case .system, .pinned, .none: break
            }
            let other = SuggestedEntry.otherKeys(of: entry, host: target, ports: entry.policy.ports.union(ports),
                                                 allowPorts: allowPorts, keepEnforce: false)
            before += other.before
            after += other.after
        } else if ports != [443] {
            after.append("ports = [\(ports.sorted().map(String.init).joined(separator: ", "))]")
        }
        lines.append("[hosts.\"\(host.name)\"]")
        lines += before
        lines.append("pin = \"public-key\"")
        lines.append("pins = [")
        for key in keys {
            let role = key.position == 0 ? "leaf" : "intermediate"
            lines.append("  \"\(key.pin)\",  # \(role): \(comment(key.subject)); \(key.connections) connection(s), last \(key.lastSeen)")
        }
        if leaves < keys.count {
            lines.append("  # add the pin of a backup key here (pinproxy pin BACKUP-KEY-FILE)")
        } else {
            lines += PinCommand.backupSlot(caKeys: 0)
        }
        lines.append("]")
        return (lines + after).joined(separator: "\n")
    }

    /// Text safe inside a one-line TOML comment: no line breaks, controls or format characters.
    static func comment(_ text: String) -> String {
        var result = ""
        for scalar in text.unicodeScalars {
            switch scalar.properties.generalCategory {
            case .control, .format, .lineSeparator, .paragraphSeparator:
                result += "\\u" + scalar.value.hex(digits: 4)
            default:
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }
}
