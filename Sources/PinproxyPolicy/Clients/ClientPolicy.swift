/// What `[clients]` decided for one connection: who the client is, which sections matched,
/// and whether they let it reach the host.
public struct ClientDecision: Sendable, Equatable {
    public enum Outcome: Sendable, Equatable {
        case allow
        /// `client-denied`, enforced.
        case refuse
        /// `client-denied` from sections with `enforce = false` only: allowed and reported.
        case reportOnly
    }

    /// nil when no identity was looked up (the config has no `[clients]`).
    public let identity: ClientIdentity?
    /// The keys of the matching sections, in config order.
    public let sections: [String]
    public let outcome: Outcome
    /// Why the client is (or would be) refused, naming it and the sections; empty when allowed.
    public let detail: String

    public init(identity: ClientIdentity?, sections: [String], outcome: Outcome, detail: String) {
        self.identity = identity
        self.sections = sections
        self.outcome = outcome
        self.detail = detail
    }

    /// No `[clients]` section: nothing narrows the host table.
    public static let notApplied = ClientDecision(identity: nil, sections: [], outcome: .allow, detail: "")

    /// The `client` metric label: the matching sections joined in config order, or `none`.
    /// Bounded by the config: never an executable path or a pid the config does not name.
    public var metricLabel: String { sections.isEmpty ? Self.noSectionLabel : sections.joined(separator: ",") }

    public static let noSectionLabel = "none"

    /// The `net:` sections that matched, joined with `,` (the `client_net` log field); nil
    /// when none did.
    public var networkSections: String? {
        let networks = sections.filter { $0.hasPrefix(ClientSelectorText.networkPrefix) }
        return networks.isEmpty ? nil : networks.joined(separator: ",")
    }

}

/// The narrowing `[clients]` applies: pure, the identity and the rules in, a decision out. The
/// host entry still decides the TLS checks; this only says who may reach which host.
public enum ClientPolicy {
    /// The decision of `rules` on a client with `identity` reaching `host`:
    /// - Every section whose selector matches applies. The host must be in the `allow` of each
    ///   (a section without `allow` restricts nothing) and in the `deny` of none (`deny` wins).
    /// - An `unknown` client matches only `[clients."unknown"]`; without one it is refused as
    ///   soon as any section exists.
    /// - A partly known client (a local one whose unit could not be told) fails closed: it
    ///   answers to `[clients."unknown"]`, which stands for the part not known (without one it is
    ///   refused), and to every section it may belong to: those its known parts match (`uid:`,
    ///   `user:`, `exe:`) and every `unit:` section, since it may be in any unit. A `remote` client matches only `[clients."remote"]`;
    ///   without one it gets the host table. A `forwarded` client matches only the `net:`
    ///   sections whose network holds its address; without one it gets the host table.
    /// - A refusal by sections that all say `enforce = false` is report-only; one enforcing
    ///   section that refuses makes it a refusal.
    public static func decide(host: TargetHost, identity: ClientIdentity, rules: ClientRules) -> ClientDecision {
        guard !rules.isEmpty else { return ClientDecision(identity: identity, sections: [], outcome: .allow, detail: "") }
        let matching = rules.sections.filter { $0.selector.matches(identity) }
        let keys = matching.map(\.key)
        if case .unknown = identity, matching.isEmpty {
            return ClientDecision(identity: identity, sections: [], outcome: .refuse,
                                  detail: "client \(identity): once [clients] sections exist, an unknown client is refused unless a [clients.\"unknown\"] section admits it")
        }
        if case .partlyKnown = identity, !matching.contains(where: { $0.selector == .unknown }) {
            return ClientDecision(identity: identity, sections: keys, outcome: .refuse,
                                  detail: "client \(identity): part of who it is is not known, and an unknown client is refused unless a [clients.\"unknown\"] section admits it")
        }
        var refusing: [(section: ClientSection, why: String)] = []
        for section in matching {
            if section.deny.contains(where: { $0.matches(host) }) {
                refusing.append((section, "denies \(host)"))
            } else if let allow = section.allow, !allow.contains(where: { $0.matches(host) }) {
                refusing.append((section, allow.isEmpty ? "allows no host" : "does not allow \(host)"))
            }
        }
        guard !refusing.isEmpty else { return ClientDecision(identity: identity, sections: keys, outcome: .allow, detail: "") }
        let enforced = refusing.filter(\.section.enforce)
        let shown = enforced.isEmpty ? refusing : enforced
        let detail = "client \(identity): " + shown.map { "\($0.section.name) \($0.why)" }.joined(separator: "; ")
        return ClientDecision(identity: identity, sections: keys, outcome: enforced.isEmpty ? .reportOnly : .refuse, detail: detail)
    }
}
