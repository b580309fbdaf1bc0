/// What a `[clients."SELECTOR"]` section applies to.
public enum ClientSelector: Hashable, Sendable {
    case uid(UInt32)
    /// `user:NAME`, with the uid the user database gave NAME when the config was loaded.
    case user(String, uid: UInt32)
    case exe(String)
    case unit(String)
    case unknown
    case remote
    /// `net:CIDR`: forwarded clients whose source address lies in the network.
    case network(ClientNetwork)

    /// Whether a client with `identity` is what this selector names. A forwarded client is
    /// named by `net:` sections only: it is not `remote`, and it has no uid, unit or program.
    public func matches(_ identity: ClientIdentity) -> Bool {
        switch (self, identity) {
        case (.uid(let uid), .local(let client)), (.user(_, let uid), .local(let client)),
             (.uid(let uid), .partlyKnown(let client, _)), (.user(_, let uid), .partlyKnown(let client, _)): return client.uid == uid
        case (.exe(let path), .local(let client)), (.exe(let path), .partlyKnown(let client, _)): return client.exe == path
        case (.unit(let unit), .local(let client)): return client.unit == unit
        // A partly known client may be in any unit: every unit: section applies (fail closed).
        case (.unit(let unit), .partlyKnown(let client, _)): return client.unit.map { $0 == unit } ?? true
        // What is not known of a partly known client answers to the unknown clients' section.
        case (.unknown, .unknown), (.unknown, .partlyKnown), (.remote, .remote): return true
        case (.network(let network), .forwarded(let address)): return network.contains(address)
        case (.uid, _), (.user, _), (.exe, _), (.unit, _), (.unknown, _), (.remote, _), (.network, _): return false
        }
    }
}

/// One `[clients."SELECTOR"]` section.
public struct ClientSection: Sendable {
    public let selector: ClientSelector
    /// The selector as written (`unit:backup.service`): the `client` metric label.
    public let key: String
    public let line: Int
    /// The hosts this section's clients may reach; nil: no restriction from this section.
    public let allow: [HostPattern]?
    /// Hosts they may not reach, whatever any `allow` says.
    public let deny: [HostPattern]
    /// false: this section's client-denied refusals are report-only.
    public let enforce: Bool

    public init(selector: ClientSelector, key: String, line: Int, allow: [HostPattern]?, deny: [HostPattern], enforce: Bool) {
        self.selector = selector
        self.key = key
        self.line = line
        self.allow = allow
        self.deny = deny
        self.enforce = enforce
    }

    /// `clients."user:www-data"`.
    public var name: String { displayKeyPath(["clients", key]) }
}

/// Every `[clients]` section, in config order.
public struct ClientRules: Sendable {
    public let sections: [ClientSection]

    public init(sections: [ClientSection] = []) {
        self.sections = sections
    }

    /// No `[clients]` section: nobody's identity is looked up, and every client gets the host table.
    public var isEmpty: Bool { sections.isEmpty }

    /// Whether a section names an executable, so that a client's program must be looked up.
    public var needsExecutable: Bool {
        sections.contains { if case .exe = $0.selector { return true } else { return false } }
    }
}

extension HostPattern {
    /// Whether `host` is this pattern: the same name, one more label in front of a `*.`
    /// pattern's name, or the same IP literal.
    public func matches(_ host: TargetHost) -> Bool {
        switch (self, host) {
        case (.exact(let pattern), .name(let name)): return pattern == name
        case (.wildcard(let parent), .name(let name)):
            guard name.utf8.count > parent.utf8.count + 1, name.hasSuffix("." + parent) else { return false }
            return !name.utf8.dropLast(parent.utf8.count + 1).contains(UInt8(ascii: "."))
        case (.ip(let pattern), .ip(let address)): return pattern == address
        case (.exact, .ip), (.wildcard, .ip), (.ip, .name): return false
        }
    }
}
