import PinproxyCore
import PinproxyInterop

/// The host → policy table. Lookup precedence: exact name > `*.` pattern > the
/// `include_subdomains` entry with the longest matching suffix > `[default]`.
public struct PolicyTable: Sendable {
    public let defaultEntry: PolicyEntry
    /// Every host entry in config order.
    public let entries: [PolicyEntry]
    private let positions: Positions

    /// Where each pattern's entry sits in `entries`. It is made from the patterns alone, so the
    /// loader builds it while the policies are still being parsed.
    struct Positions: Sendable {
        /// The patterns in entry order (nil for an entry without one, which no host meets).
        let patterns: [HostPattern?]
        private(set) var exact: [String: Int] = [:]
        private(set) var wildcard: [String: Int] = [:]
        private(set) var addresses: [IPAddress: Int] = [:]

        /// Indexes `patterns`, which must be unique.
        init(_ patterns: [HostPattern?]) {
            self.patterns = patterns
            var counts = (exact: 0, wildcard: 0)
            for pattern in patterns {
                switch pattern {
                case .exact: counts.exact += 1
                case .wildcard: counts.wildcard += 1
                case .ip, nil: continue
                }
            }
            exact.reserveCapacity(counts.exact)
            wildcard.reserveCapacity(counts.wildcard)
            for (position, pattern) in patterns.enumerated() {
                switch pattern {
                case .exact(let name): exact[name] = position
                case .wildcard(let parent): wildcard[parent] = position
                case .ip(let address): addresses[address] = position
                case nil: continue
                }
            }
        }

        /// True when these positions were made from exactly the patterns of `entries`, in order.
        func fit(_ entries: [PolicyEntry]) -> Bool {
            entries.count == patterns.count && zip(entries, patterns).allSatisfy { $0.pattern == $1 }
        }
    }

    /// Builds the table; host entries must have unique patterns.
    public init(defaultEntry: PolicyEntry, entries: [PolicyEntry]) {
        self.init(defaultEntry: defaultEntry, entries: entries, positions: Positions(entries.map(\.pattern)))
    }

    /// Builds the table with `positions` made from exactly these entries' patterns, in order.
    init(defaultEntry: PolicyEntry, entries: [PolicyEntry], positions: Positions) {
        // Unreachable: positions come from these entries (`init` above) or pass `fit` first (`Load.config`).
        precondition(positions.fit(entries), "the positions were not made from these entries")
        self.defaultEntry = defaultEntry
        self.entries = entries
        self.positions = positions
    }

    /// The entry that applies to `host`.
    public func lookup(_ host: TargetHost) -> PolicyEntry {
        switch host {
        case .ip(let address):
            return positions.addresses[address].map { entries[$0] } ?? defaultEntry
        case .name(let name):
            if let position = positions.exact[name] { return entries[position] }
            var suffix = Substring(name)
            if let dot = suffix.firstIndex(of: "."), let position = positions.wildcard[String(suffix[suffix.index(after: dot)...])] {
                return entries[position]
            }
            while let dot = suffix.firstIndex(of: ".") {
                suffix = suffix[suffix.index(after: dot)...]
                if let position = positions.exact[String(suffix)], entries[position].policy.includeSubdomains {
                    return entries[position]
                }
            }
            return defaultEntry
        }
    }
}
