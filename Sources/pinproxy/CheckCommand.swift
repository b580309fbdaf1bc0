import ArgumentParser
import Foundation
import PinproxyInterop
import PinproxyPolicy
import PinproxyProxy

/// `pinproxy check`: runs the daemon's loader on a config and prints a one-screen summary.
struct CheckCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Validate a config: every error as FILE:LINE (exit 1), else a summary and warnings (exit 0)."
    )

    @OptionGroup var options: ConfigOption

    /// TargetHost entries listed by name before the summary shortens.
    static let listedEntries = 20

    func run() throws {
        let config = try options.loadOrExit { [options] error in
            "\(options.config ?? ConfigLoader.embeddedPath): \(error.diagnostics.count) error(s); the config is rejected"
        }
        let entries = config.policies.entries
        let pinned = entries.filter { $0.policy.pinKind != .none }
        let count = { (action: HostPolicy.Action) in entries.filter { $0.policy.action == action }.count }
        print("\(config.path): ok")
        print("listen: \(config.proxy.listen.map(\.description).joined(separator: ", "))  allow_ports: \(config.proxy.allowPorts.sorted().map(String.init).joined(separator: ", "))  block_private_destinations: \(config.proxy.blockPrivateDestinations)")
        print("resolve: \(config.resolve.count) name(s)")
        print("default: \(Self.describe(config.policies.defaultEntry.policy))")
        print("hosts: \(entries.count) entr\(entries.count == 1 ? "y" : "ies"), \(pinned.count) pinned with \(pinned.reduce(0) { $0 + $1.policy.pins.count }) pins, \(count(.deny)) denied, \(count(.allowInsecure)) allow-insecure, \(entries.filter { !$0.policy.enforce }.count) report-only")
        for entry in entries.prefix(Self.listedEntries) {
            let pattern = entry.pattern?.description ?? "default"
            print("  \(pattern.padding(toLength: max(pattern.count, 32), withPad: " ", startingAt: 0)) \(Self.describe(entry.policy))")
        }
        if entries.count > Self.listedEntries { print("  ... and \(entries.count - Self.listedEntries) more") }
        let warnings = config.warnings.map(\.description) + Self.privateResolveWarnings(config)
        print("warnings: \(warnings.count)")
        for warning in warnings { print(warning) }
        // The process ends here: skip freeing a table that may hold 100,000 entries.
        fflush(nil)
        Foundation.exit(0)
    }

    /// `[resolve]` names that `block_private_destinations = true` makes unreachable (every
    /// address private: each connection refused destination-denied) or partly so.
    static func privateResolveWarnings(_ config: Config) -> [String] {
        guard config.proxy.blockPrivateDestinations else { return [] }
        return config.resolve.keys.sorted().compactMap { name in
            let addresses = config.resolve[name] ?? []
            let blocked = addresses.filter(DestinationGuard.isPrivate)
            guard !blocked.isEmpty else { return nil }
            let listed = blocked.map(\.description).joined(separator: ", ")
            let effect = blocked.count == addresses.count
                ? "every connection to \(name) is refused (destination-denied)"
                : "connections to \(name) skip \(blocked.count == 1 ? "it" : "them")"
            return "\(config.path): warning: resolve.\"\(name)\" gives the private address\(blocked.count == 1 ? "" : "es") \(listed) while block_private_destinations = true: \(effect); set block_private_destinations = false in [proxy] to allow private destinations"
        }
    }

    static func describe(_ policy: HostPolicy) -> String {
        var parts = [policy.action.rawValue]
        if policy.action == .verify {
            parts.append("trust \(policy.trust.name)")
            if policy.pinKind != .none { parts.append("\(policy.pinKind.rawValue) pins: \(policy.pins.count)") }
            if !policy.validateHost { parts.append("host not validated") }
            if policy.revocation.name != "off" { parts.append("revocation \(policy.revocation.name)") }
            if let expires = policy.expires { parts.append("pins expire after \(expires)") }
            if policy.minTLS != .v1_2 { parts.append("min_tls \(policy.minTLS.rawValue)") }
        }
        if policy.includeSubdomains { parts.append("with subdomains") }
        if !policy.enforce { parts.append("report-only") }
        return parts.joined(separator: ", ")
    }
}
