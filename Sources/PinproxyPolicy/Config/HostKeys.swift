/// The keys of the `hosts` table in file order, with what can be known from the keys alone:
/// each one's pattern, the patterns written twice, and where each entry will sit in the
/// policy table. For a config whose entries all have their own header the loader works this
/// out from the headers `ConfigLexer` recorded (`ConfigSource.hostKeys()`) while TOMLKit parses.
struct HostKeys: Sendable {
    /// One `[hosts."KEY"]` key.
    struct Key: Sendable {
        let key: String
        /// The line of its header (or of where it is written).
        let line: Int
        /// nil when the key is not a valid pattern.
        let pattern: HostPattern?
    }

    let keys: [Key]
    /// Keys whose pattern an earlier key already has (equal once normalised): indexes into
    /// `keys`, each with the index of the first key with that pattern.
    let duplicates: [(again: Int, first: Int)]
    /// The table positions, when every key is a valid pattern and none is written twice.
    let positions: PolicyTable.Positions?
    /// False when the same key is listed twice: TOML forbids that, so the list did not come
    /// from the document (the lexer reads on past a syntax error as best it can, and TOMLKit may read otherwise).
    let distinct: Bool

    init(_ written: [(key: String, line: Int)]) {
        keys = written.map { Key(key: $0.key, line: $0.line, pattern: HostPattern($0.key)) }
        var firstWith = [HostPattern: Int](minimumCapacity: keys.count)
        var duplicates: [(again: Int, first: Int)] = []
        for (index, key) in keys.enumerated() {
            guard let pattern = key.pattern, let first = firstWith.updateValue(index, forKey: pattern) else { continue }
            firstWith[pattern] = first
            duplicates.append((index, first))
        }
        self.duplicates = duplicates
        // Distinct patterns are distinct keys; otherwise the keys themselves are compared.
        distinct = firstWith.count == keys.count || Set(keys.lazy.map(\.key)).count == keys.count
        let patterns = keys.compactMap(\.pattern)
        positions = duplicates.isEmpty && patterns.count == keys.count ? PolicyTable.Positions(patterns) : nil
    }
}
