import Foundation
import PinproxyInterop
import PinproxyPolicy

/// The block `diagnose` suggests for HOST: the entry that applied to it, complete (its trust,
/// host check, ports, TLS floor, revocation, CT, custom check, report-only), pinned to the keys of
/// the chain the server just sent. Pasted in place of that entry (or as a new one), it passes
/// `check` and allows that server.
struct SuggestedEntry {
    let host: TargetHost
    let port: UInt16
    let chain: [Certificate]
    let entry: PolicyEntry
    let verdict: Verdict
    /// The ports a host entry without `ports` gets (`proxy.allow_ports`).
    let allowPorts: Set<UInt16>

    func render() throws -> String {
        let policy = entry.policy
        var before: [String] = [entry.pattern == nil ? "# a new entry: only [default] applied to this host"
                                                     : "# replaces \(entry.name)" + (entry.line > 0 ? " (line \(entry.line))" : "")]
        before += try trustLines()
        if !policy.validateHost { before.append("validate_host = false") }
        var after: [String] = []
        let ports = policy.ports.union([port])
        if ports != allowPorts { after.append("ports = [\(ports.sorted().map(String.init).joined(separator: ", "))]") }
        if policy.minTLS != .v1_2 { after.append("min_tls = \(Self.quoted(policy.minTLS.rawValue))") }
        if case .off = policy.revocation {} else { after.append("revocation = \(Self.quoted(policy.revocation.name))") }
        if let crls = entry.written.crls { after.append("crls = \(Self.list(crls))") }
        if policy.ct != .off { after.append("ct = \(Self.quoted(policy.ct.rawValue))") }
        if !policy.requireWebPKIProfile { after.append("require_web_pki_profile = false") }
        if let command = policy.verifyCommand { after.append("verify_command = \(Self.list(command))") }
        if policy.includeSubdomains, entry.pattern?.description == host.description { after.append("include_subdomains = true") }
        if !policy.enforce { after.append("enforce = false") }
        return PinCommand.hostBlock(host: host, chain: chain, before: before, after: after)
    }

    /// The entry's own `trust`, unless the chain does not verify to it (or the entry's anchors
    /// are its pinned certificates, which the new pins replace): then the anchor the chain needs.
    func trustLines() throws -> [String] {
        let anchorNeeded = { try PinCommand.trustLines(for: chain, host: host, saveAnchor: nil) }
        if verdict.failures.contains(where: { $0.reason == .untrustedChain }) { return try anchorNeeded() }
        switch entry.policy.trust {
        case .pinned: return try anchorNeeded()
        case .system: return []
        case .none: return ["trust = \"none\""]
        case .anchors, .systemAndListed: return entry.written.trust.map { ["trust = \(Self.list($0))"] } ?? []
        }
    }

    /// A TOML array of basic strings.
    static func list(_ values: [String]) -> String {
        "[" + values.map(quoted).joined(separator: ", ") + "]"
    }

    /// A TOML basic string: quotes, backslashes and control characters escaped.
    static func quoted(_ text: String) -> String {
        var result = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F: result += String(format: "\\u%04X", scalar.value)
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result + "\""
    }
}
