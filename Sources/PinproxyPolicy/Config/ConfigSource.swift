import FoundationEssentials
import PinproxyCore

/// A config's text as `ConfigLexer` read it, for what TOMLKit does not give: whether the text
/// may reach TOMLKit at all, the host keys with their lines, and the line of any table header
/// or key, so that problems found after parsing can name it.
///
/// The lexer's one pass records every header and key where it is written; the index of lines by
/// key path is built from that record only when a diagnostic first asks for a line.
final class ConfigSource: @unchecked Sendable {
    private let text: [UInt8]
    private let headers: [ConfigLexer.Header]
    private let keys: [ConfigLexer.Key]
    private let unrecordedHeaders: Int
    /// Every header and key line by path, built on first use (by whichever thread asks first).
    private let builtLines = Locked<Lines?>(nil)
    private var lines: Lines {
        builtLines.withLock { built in
            if let built { return built }
            let lines = Lines(text, headers: headers, keys: keys)
            built = lines
            return lines
        }
    }

    private static let separator = "\u{1F}"

    /// Lexes `text`: the source, or why `text` must not reach TOMLKit and the line concerned.
    static func read(_ text: String) -> Result<ConfigSource, ConfigLexer.Refusal> {
        let bytes = Array(text.utf8)
        return ConfigLexer.lex(bytes).map { ConfigSource(bytes, $0) }
    }

    private init(_ text: [UInt8], _ lexer: ConfigLexer) {
        self.text = text
        headers = lexer.headers
        keys = lexer.keys
        unrecordedHeaders = lexer.unrecordedHeaders
    }

    /// Texts shorter than this are parsed whole: a second parse thread is not worth it.
    static let splitMinimumBytes = 1 << 20

    /// Where the text may be parsed as two documents, one after the other, that together are
    /// the whole: the offset of a `[hosts."X"]` header near the middle, or nil. Only when it is
    /// safe to: from that header on, every header is a `[hosts."X"]` table or one below it
    /// (no `[[…]]`, no other table), the text before it writes nothing into `hosts` but through
    /// such headers (no `[hosts]`, no top-level `hosts` key, dotted or inline), and no host key
    /// has headers on both sides. Every header and key was recorded by the lexer; the parse of
    /// each part, if either fails, is redone on the whole text (so syntax errors are the
    /// whole parse's).
    func splitOffset(minimumBytes: Int = splitMinimumBytes) -> Int? {
        split(minimumBytes: minimumBytes)?.offset
    }

    /// `splitOffset(minimumBytes:)` and the line of the header there.
    func split(minimumBytes: Int = splitMinimumBytes) -> (offset: Int, line: Int)? {
        guard text.count >= minimumBytes, unrecordedHeaders == 0 else { return nil }
        let middle = text.count / 2
        guard let split = headers.firstIndex(where: { $0.offset >= middle && Self.isHostHeader($0) && $0.path.count == 2 }),
              headers[split].offset <= text.count - text.count / 4 else { return nil }
        var secondKeys = Set<String>()
        for header in headers[split...] {
            guard Self.isHostHeader(header) else { return nil }
            secondKeys.insert(header.path[1])
        }
        for header in headers[..<split] where header.path[0] == "hosts" {
            guard Self.isHostHeader(header), !secondKeys.contains(header.path[1]) else { return nil }
        }
        for key in keys {
            guard key.header < 0 else { break }
            var position = key.bytes.lowerBound
            guard let path = ConfigLexer.parseKeyPath(text, &position, key.bytes.upperBound), path.first != "hosts" else { return nil }
        }
        return (headers[split].offset, headers[split].line)
    }

    /// `[hosts."X"]` or a table below it.
    private static func isHostHeader(_ header: ConfigLexer.Header) -> Bool {
        header.path.count >= 2 && header.path[0] == "hosts" && !header.isArrayElement
    }

    /// The `[hosts."…"]` tables written with their own header, in file order, with what their
    /// keys alone tell.
    func hostKeys() -> HostKeys {
        HostKeys(headers.lazy.filter { $0.path.count == 2 && $0.path[0] == "hosts" && !$0.isArrayElement }.map { (key: $0.path[1], line: $0.line) })
    }

    /// The line of the top-level table `name`: its `[name]` header when it has one, else as
    /// `line(of:)` finds it.
    func line(ofTable name: String) -> Int {
        headers.first { $0.path.count == 1 && $0.path[0] == name && !$0.isArrayElement }?.line ?? line(of: [name])
    }

    /// The line of a header or key; for a path never written itself (an implicit table), the
    /// first line written below it; else its parent's line; else 1.
    func line(of path: [String]) -> Int {
        let lines = self.lines
        let key = path.joined(separator: Self.separator)
        if let line = lines.lines[key] ?? lines.firstBelow[key] { return line }
        return path.isEmpty ? 1 : line(of: Array(path.dropLast()))
    }

    /// The line of a header or key written in the text; nil when it is not.
    func writtenLine(of path: [String]) -> Int? {
        lines.lines[path.joined(separator: Self.separator)]
    }

    /// The line, from the line of `path` up to the next header or key, on which `literal` first
    /// appears (an array element written on its own line); the line of `path` when not found.
    func line(of path: [String], containing literal: String) -> Int {
        let start = line(of: path)
        let lines = self.lines
        let needle = Array(literal.utf8)
        var number = start
        while number <= lines.starts.count {
            if number > start && lines.numbers.contains(number) { break }
            let from = lines.starts[number - 1]
            var end = from
            while end < text.count && text[end] != 0x0A { end += 1 }
            if Self.contains(text, from, end, needle) { return number }
            number += 1
        }
        return start
    }

    /// The line of every table header and key, by path.
    private struct Lines {
        /// Line numbers by path, the path's components joined with U+001F.
        var lines: [String: Int] = [:]
        /// For every path with something written below it, the first line written below.
        var firstBelow: [String: Int] = [:]
        /// Every recorded line, for bounding element searches.
        var numbers: Set<Int> = []
        /// Offsets where each line starts.
        var starts: [Int] = [0]

        init(_ text: [UInt8], headers: [ConfigLexer.Header], keys: [ConfigLexer.Key]) {
            for (offset, byte) in text.enumerated() where byte == 0x0A { starts.append(offset + 1) }
            // Headers and keys in file order: each key comes after the header it belongs to.
            var nextHeader = 0
            for key in keys {
                while nextHeader <= key.header {
                    record(headers[nextHeader].path, headers[nextHeader].line)
                    nextHeader += 1
                }
                var position = key.bytes.lowerBound
                guard let path = ConfigLexer.parseKeyPath(text, &position, key.bytes.upperBound) else { continue }
                record((key.header >= 0 ? headers[key.header].path : []) + path, key.line)
            }
            for header in headers[nextHeader...] { record(header.path, header.line) }
        }

        private mutating func record(_ path: [String], _ number: Int) {
            var key = ""
            for (depth, component) in path.enumerated() {
                if depth > 0 {
                    if firstBelow[key] == nil { firstBelow[key] = number }
                    key += ConfigSource.separator
                }
                key += component
            }
            if lines[key] == nil { lines[key] = number }
            numbers.insert(number)
        }
    }

    private static func contains(_ text: [UInt8], _ from: Int, _ end: Int, _ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, end - from >= needle.count else { return false }
        for start in from...(end - needle.count) where text[start] == needle[0] {
            if text[start..<start + needle.count].elementsEqual(needle) { return true }
        }
        return false
    }
}
