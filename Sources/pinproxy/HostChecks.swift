import FoundationEssentials
import PinproxyInterop
import PinproxyPolicy
import PinproxyCore

/// What `pinproxy check` judges against this host rather than the text: what the daemon's
/// start, a reload or `egress apply` would find here. Errors are what one of them refuses;
/// warnings name this host's state.
enum HostChecks {
    /// Every problem of `config` on this host, whose system store holds `systemStore`.
    static func problems(in config: Config, systemStore: TrustStore.SystemStoreContents) -> [Diagnostic] {
        exemptUserProblems(config) + loopbackProblems(config) + systemStoreProblems(config, store: systemStore)
    }

    /// With `transparent_listen` set, each `capture.exempt_users` name that is no user here:
    /// `egress apply` refuses the config (`EgressRuleset`). A config that does not capture
    /// never needs them (the default `["pinproxy"]` included).
    static func exemptUserProblems(_ config: Config) -> [Diagnostic] {
        guard !config.proxy.transparentListen.isEmpty else { return [] }
        return config.capture.exemptUsers.compactMap { name in
            guard case .missing = UserDatabase.uid(ofUser: name) else { return nil }
            return Diagnostic(file: config.path, line: config.lines.exemptUsers, severity: .error,
                              message: "capture.exempt_users: there is no user \"\(name)\" on this host, so `pinproxy egress apply` refuses this config (create it, e.g. `useradd --system \(name)`, or list the user pinproxy runs as)")
        }
    }

    /// `transparent_listen` against this host's IPv6: a `[::1]` listener is needed where `::1`
    /// can be bound, and the IPv4 one alone where it cannot.
    static func loopbackProblems(_ config: Config, ipv6Available: Bool = ExclusiveListener.loopbackIPv6Available) -> [Diagnostic] {
        let listeners = config.proxy.transparentListen
        guard !listeners.isEmpty else { return [] }
        let hasV6 = listeners.contains { $0.address.isIPv6 }
        func warning(_ message: String) -> Diagnostic {
            Diagnostic(file: config.path, line: config.lines.transparentListen, severity: .warning, message: message)
        }
        if ipv6Available && !hasV6 {
            return [warning("proxy.transparent_listen has no [::1] listener, but this host can bind [::1] (IPv6 loopback is on): the egress lock needs \"[::1]:PORT\" for IPv6 HTTPS")]
        }
        if !ipv6Available && hasV6 {
            return [warning("proxy.transparent_listen has a [::1] listener, but this host cannot bind [::1] (IPv6 is disabled here): list the 127.0.0.1 listener alone")]
        }
        return []
    }

    /// `trust = "system"` (or a list with "system") where the system store is missing or empty:
    /// every chain such an entry checks is refused (untrusted-chain).
    static func systemStoreProblems(_ config: Config, store: TrustStore.SystemStoreContents) -> [Diagnostic] {
        // A store with certificates (nearly every host) needs no look at the entries.
        guard store.certificates == 0 else { return [] }
        let users = ([config.policies.defaultEntry] + config.policies.entries).filter { entry in
            let policy = entry.policy
            guard policy.action == .verify, policy.mode == .intercept else { return false }
            switch policy.trust {
            case .system, .systemAndListed: return true
            case .anchors, .pinned, .none: return false
            }
        }
        guard let first = users.first else { return [] }
        let state = store.exists ? "\(store.location) holds no certificate" : "there is no \(store.location)"
        let who = users.count == 1 ? first.name : "\(first.name) and \(users.count - 1) more entr\(users.count == 2 ? "y" : "ies")"
        return [Diagnostic(file: config.path, line: max(first.line, 1), severity: .warning,
                           message: "\(who): trust uses the system trust store, but this host has none (\(state)): every chain they check is refused (untrusted-chain); install ca-certificates, or list anchors in trust")]
    }
}
