import PinproxyPolicy

/// The local CA's minted leaves by host, bounded in count and in bytes (each leaf counts its
/// certificate's DER and its key's PEM): past either bound, the least recently used leaves go
/// until both are back under nine tenths of it, so that a flood of new names costs a sort
/// every tenth of the cache, not one per name. Not thread-safe: `LocalCA` keeps it behind a lock.
struct MintedLeafCache {
    private struct Entry {
        let leaf: LocalCA.MintedLeaf
        let bytes: Int
        var lastUse: UInt64
    }

    let maximumCount: Int
    let maximumBytes: Int
    private var entries: [TargetHost: Entry] = [:]
    private var clock: UInt64 = 0
    private(set) var totalBytes = 0

    init(maximumCount: Int, maximumBytes: Int) {
        self.maximumCount = maximumCount
        self.maximumBytes = maximumBytes
    }

    var count: Int { entries.count }

    /// The leaf kept for `host`, which becomes the most recently used.
    mutating func leaf(for host: TargetHost) -> LocalCA.MintedLeaf? {
        guard entries[host] != nil else { return nil }
        clock += 1
        entries[host]?.lastUse = clock
        return entries[host]?.leaf
    }

    /// Keeps `leaf` for `host` (replacing an older one), then evicts past the bounds.
    mutating func insert(_ leaf: LocalCA.MintedLeaf, bytes: Int, for host: TargetHost) {
        clock += 1
        if let old = entries.updateValue(Entry(leaf: leaf, bytes: bytes, lastUse: clock), forKey: host) { totalBytes -= old.bytes }
        totalBytes += bytes
        guard entries.count > maximumCount || totalBytes > maximumBytes else { return }
        let byAge = entries.sorted { $0.value.lastUse < $1.value.lastUse }
        for (host, entry) in byAge where entries.count > maximumCount * 9 / 10 || totalBytes > maximumBytes * 9 / 10 {
            entries[host] = nil
            totalBytes -= entry.bytes
        }
    }
}
