/// Values kept by key, at most `limit` of them: a new key at the limit empties the cache first.
/// Thread-safe.
public final class BoundedCache<Value: Sendable>: Sendable {
    private let entries = Locked<[String: Value]>([:])
    private let limit: Int

    public init(limit: Int = 10_000) {
        self.limit = limit
    }

    public func value(for key: String) -> Value? {
        entries.withLock { $0[key] }
    }

    public func store(_ value: Value, for key: String) {
        entries.withLock { cache in
            if cache.count >= limit, cache[key] == nil { cache.removeAll(keepingCapacity: true) }
            cache[key] = value
        }
    }

    /// Forgets the value for `key` (e.g. when a resumed connection was refused).
    public func remove(_ key: String) {
        _ = entries.withLock { $0.removeValue(forKey: key) }
    }

    /// Keeps only the values whose key `keep` accepts (after a reload: unchanged policies).
    public func retain(where keep: (String) -> Bool) {
        entries.withLock { cache in cache = cache.filter { keep($0.key) } }
    }

    /// Values held.
    public var count: Int { entries.withLock { $0.count } }
}
