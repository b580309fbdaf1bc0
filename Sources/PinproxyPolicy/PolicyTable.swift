import PinproxyInterop

/// The host → policy table. Lookup precedence: exact name > `*.` pattern > the
/// `include_subdomains` entry with the longest matching suffix > `[default]`.
public struct PolicyTable: Sendable {
    public let defaultEntry: PolicyEntry
    /// Every host entry in config order.
    public let entries: [PolicyEntry]
    private var exact: [String: PolicyEntry] = [:]
    private var wildcard: [String: PolicyEntry] = [:]
    private var subdomains: [String: PolicyEntry] = [:]
    private var addresses: [IPAddress: PolicyEntry] = [:]

    /// Builds the table; patterns must already be unique.
    public init(defaultEntry: PolicyEntry, entries: [PolicyEntry]) {
        self.defaultEntry = defaultEntry
        self.entries = entries
        exact.reserveCapacity(entries.count)
        for entry in entries {
            switch entry.pattern {
            case .exact(let name):
                exact[name] = entry
                if entry.policy.includeSubdomains { subdomains[name] = entry }
            case .wildcard(let parent):
                wildcard[parent] = entry
            case .ip(let address):
                addresses[address] = entry
            case nil:
                continue
            }
        }
    }

    /// The entry that applies to `host`.
    public func lookup(_ host: TargetHost) -> PolicyEntry {
        switch host {
        case .ip(let address):
            return addresses[address] ?? defaultEntry
        case .name(let name):
            if let entry = exact[name] { return entry }
            var suffix = Substring(name)
            if let dot = suffix.firstIndex(of: "."), let entry = wildcard[String(suffix[suffix.index(after: dot)...])] {
                return entry
            }
            while let dot = suffix.firstIndex(of: ".") {
                suffix = suffix[suffix.index(after: dot)...]
                if let entry = subdomains[String(suffix)] { return entry }
            }
            return defaultEntry
        }
    }
}
