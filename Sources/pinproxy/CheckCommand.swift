import Glibc
import ArgumentParser
import FoundationEssentials
import PinproxyInterop
import PinproxyPolicy
import PinproxyProxy
import PinproxyCore

/// `pinproxy check`: runs the daemon's loader on a config and prints a one-screen summary.
struct CheckCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Validate a config: every error as FILE:LINE (exit 1), else a summary and warnings (exit 0)."
    )

    @OptionGroup var options: ConfigOption

    @Option(name: .customLong("as"), help: ArgumentHelp("Check as this user would (the service's: pinproxy), reading every file the config names as that user; where systemd runs, under the unit's path restrictions too (systemd-run).", valueName: "USER"))
    var user: String?

    /// TargetHost entries listed by name before the summary shortens.
    static let listedEntries = 20

    func run() throws {
        if let user {
            try CheckAsUser(user: user, config: options.source.path.map { URL(fileURLWithPath: $0).standardizedFileURL.path } ?? "-").run()
        }
        ProcessLimits.keepHeapUntilExit()
        // Counted on another core while the config loads (parsing every certificate of the
        // bundle is 0.1 s); nothing is left reading on return, as OpenSSL's exit handler requires.
        let systemStore = InBackground { TrustStore.systemStoreContents() }
        defer { _ = systemStore.result() }
        let config = try options.loadOrExit { [options] error in
            "\(options.source.name): \(error.diagnostics.count) error(s); the config is rejected"
        }
        let environment = ClientIdentityEnvironment.problems(in: config) + HostChecks.problems(in: config, systemStore: systemStore.result())
        let environmentErrors = environment.filter { $0.severity == .error }
        if !environmentErrors.isEmpty {
            for error in environmentErrors { printError(error.description) }
            printError("\(config.path): \(environmentErrors.count) error(s); the config is rejected")
            throw ExitCode(1)
        }
        let entries = config.policies.entries
        // Counted in one pass, without copying 100,000 entries into new arrays.
        var pinned = 0, pins = 0, denied = 0, insecure = 0, reportOnly = 0, tunnels = 0
        for entry in entries {
            let policy = entry.policy
            if policy.pinKind != .none { pinned += 1; pins += policy.pins.count }
            if policy.action == .deny { denied += 1 }
            if policy.action == .allowInsecure { insecure += 1 }
            if !policy.enforce { reportOnly += 1 }
            if policy.mode == .tunnel { tunnels += 1 }
        }
        print("\(config.path): ok")
        print("listen: \(config.proxy.listen.map(\.description).joined(separator: ", "))  allow_ports: \(config.proxy.allowPorts.sorted().map(String.init).joined(separator: ", "))  block_private_destinations: \(config.proxy.blockPrivateDestinations)")
        if !config.proxy.transparentListen.isEmpty {
            let capture = config.capture
            print("transparent_listen: \(config.proxy.transparentListen.map(\.description).joined(separator: ", "))  capture: ports \(capture.ports.map(String.init).joined(separator: ", ")), local \(capture.local), block_quic \(capture.blockQUIC), exempt_users \(capture.exemptUsers.joined(separator: ", "))")
        }
        print("resolve: \(config.resolve.count) name(s)")
        print("default: \(Self.describe(config.policies.defaultEntry.policy))")
        print("anchors:")
        for line in Self.anchorUse(default: config.policies.defaultEntry, entries: entries) { print("  \(line)") }
        print("hosts: \(entries.count) entr\(entries.count == 1 ? "y" : "ies"), \(pinned) pinned with \(pins) pins, \(denied) denied, \(insecure) allow-insecure, \(reportOnly) report-only, \(tunnels) tunnel")
        for entry in entries.prefix(Self.listedEntries) {
            let pattern = entry.pattern?.description ?? "default"
            print("  \(pattern.padded(to: 32)) \(Self.describe(entry.policy))")
        }
        if entries.count > Self.listedEntries { print("  ... and \(entries.count - Self.listedEntries) more") }
        if !config.clients.isEmpty {
            print("clients: \(config.clients.sections.count) section(s): \(config.clients.sections.map(\.key).joined(separator: ", "))")
        }
        let warnings = config.warnings.map(\.description) + environment.map(\.description) + Self.privateResolveWarnings(config)
        print("warnings: \(warnings.count)")
        for warning in warnings { print(warning) }
        // The process ends here: skip freeing a table that may hold 100,000 entries.
        fflush(nil)
        Glibc.exit(0)
    }

    /// The anchors a trust setting verifies to: `system`, `system + CN=Corp Root`, `CN=Root A`.
    static func anchors(_ trust: HostPolicy.Trust) -> String {
        func subjects(_ certificates: [Certificate]) -> String {
            let shown = certificates.prefix(3).map(\.subject).joined(separator: "; ")
            return certificates.count > 3 ? shown + "; and \(certificates.count - 3) more" : shown
        }
        switch trust {
        case .system: return "system"
        case .systemAndListed(_, let listed): return "system + " + subjects(listed)
        case .anchors(_, let listed): return subjects(listed)
        case .pinned: return "pinned"
        case .none: return "none"
        }
    }

    /// Which entries verify to which anchors, one line per set of anchors in order of first use:
    /// `system: default and 3 entries`, `system + CN=Corp Root: 2 entries`. Entries that never
    /// verify a chain are left out.
    static func anchorUse(default defaultEntry: PolicyEntry, entries: [PolicyEntry]) -> [String] {
        var order: [String] = []
        var users: [String: (includesDefault: Bool, count: Int)] = [:]
        func add(_ entry: PolicyEntry) {
            let policy = entry.policy
            guard policy.action == .verify, policy.mode == .intercept else { return }
            let key = anchors(policy.trust)
            if users[key] == nil { order.append(key) }
            var use = users[key] ?? (false, 0)
            if entry.pattern == nil { use.includesDefault = true } else { use.count += 1 }
            users[key] = use
        }
        add(defaultEntry)
        for entry in entries { add(entry) }
        if order.isEmpty { return ["none used"] }
        return order.map { key in
            let use = users[key]!
            let count = use.count == 0 ? nil : "\(use.count) entr\(use.count == 1 ? "y" : "ies")"
            return "\(key): " + [use.includesDefault ? "default" : nil, count].compactMap { $0 }.joined(separator: " and ")
        }
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
        if policy.mode == .tunnel { return "tunnel (relayed unverified)" + (policy.includeSubdomains ? ", with subdomains" : "") }
        var parts = [policy.action.rawValue]
        if policy.action == .verify {
            parts.append("trust \(anchors(policy.trust))")
            if policy.pinKind != .none { parts.append("\(policy.pinKind.rawValue) pins: \(policy.pins.count)") }
            if !policy.validateHost { parts.append("host not validated") }
            if policy.revocation.name != "off" { parts.append("revocation \(policy.revocation.name)") }
            if let expires = policy.expires { parts.append("pins expire after \(expires)") }
            if policy.minTLS != .v1_2 { parts.append("min_tls \(policy.minTLS.rawValue)") }
            if policy.clientIdentity != nil { parts.append("client certificate") }
        }
        if policy.includeSubdomains { parts.append("with subdomains") }
        if !policy.enforce { parts.append("report-only") }
        return parts.joined(separator: ", ")
    }
}
