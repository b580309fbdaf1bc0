import FoundationEssentials
import PinproxyCore

/// What loading needs from a config's text that TOMLKit does not give: the limits that keep
/// text toml++ would abort or overflow its stack on from ever reaching it (`refusal`), U+0000,
/// which it cannot see, and where each table header and key sits, so that problems found after
/// parsing can name a line. It scans bytes, reading headers and key names but never values.
///
/// The headers of top-level tables and of host entries are listed at once (every host entry
/// needs its line, `hostKeys`); the line of every header and key is indexed only when a
/// diagnostic first asks for one.
final class ConfigSource: @unchecked Sendable {
    private let text: [UInt8]
    /// The top-level `[KEY]` headers, in file order.
    private let topLevel: [(key: String, line: Int)]
    /// The `[hosts."…"]` tables written with their own header.
    let hostKeys: HostKeys
    /// Every header and key line, built on first use (by whichever thread asks first).
    private let builtLines = Locked<Lines?>(nil)
    private var lines: Lines {
        builtLines.withLock { built in
            if let built { return built }
            let lines = Lines(text)
            built = lines
            return lines
        }
    }

    private static let separator = "\u{1F}"

    /// The first line that holds U+0000, as a byte or as a `\u0000`, `\U00000000` or `\x00`
    /// escape (a run of backslashes of odd length before it); nil when none does. TOMLKit hands
    /// the text and every key to C, which ends a string there: whatever follows would be cut
    /// off without a word. (Found beside parsing, which it does not disturb.)
    let nulLine: Int?

    static let nulMessage = "the config holds U+0000 (NUL), as a byte or as an escape: pinproxy cannot read past it"

    /// Why `text` must not reach TOMLKit, and the line concerned; nil when it may: a character
    /// or bracket toml++ aborts on (`problemBeforeParsing`), then nesting deeper than
    /// `nestingLimit`, which would overflow its stack.
    static func refusal(_ text: String) -> (line: Int, message: String)? {
        let bytes = Array(text.utf8)
        // The nesting is checked on another core meanwhile.
        let nesting = InBackground { firstTooDeep(bytes) }
        if let problem = problemBeforeParsing(bytes) {
            _ = nesting.result()
            return problem
        }
        if let (line, what) = nesting.result() {
            return (line, "\(what) nests deeper than \(nestingLimit) levels (tables, dotted key parts, inline tables and arrays count together); no pinproxy config needs more than 3")
        }
        return nil
    }

    init(_ source: String) {
        text = Array(source.utf8)
        nulLine = Self.firstNULLine(text)
        var topLevel: [(key: String, line: Int)] = []
        var hosts: [(key: String, line: Int)] = []
        Self.scan(text, keys: false) { path, number in
            if path.count == 1 { topLevel.append((path[0], number)) }
            if path.count == 2 && path[0] == "hosts" { hosts.append((path[1], number)) }
        }
        self.topLevel = topLevel
        hostKeys = HostKeys(hosts)
    }

    /// The line of the top-level table `name`: its `[name]` header when it has one, else as
    /// `line(of:)` finds it.
    func line(ofTable name: String) -> Int {
        topLevel.first { $0.key == name }?.line ?? line(of: [name])
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

    /// The line of every table header and key.
    private struct Lines {
        /// Line numbers by path, the path's components joined with U+001F.
        var lines: [String: Int] = [:]
        /// For every path with something written below it, the first line written below.
        var firstBelow: [String: Int] = [:]
        /// Every recorded line, for bounding element searches.
        var numbers: Set<Int> = []
        /// Offsets where each line starts.
        var starts: [Int] = [0]

        init(_ text: [UInt8]) {
            for (offset, byte) in text.enumerated() where byte == 0x0A { starts.append(offset + 1) }
            ConfigSource.scan(text, keys: true) { path, number in
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
    }

    /// Calls `visit` with the path and line of every table header and, if asked, of every key
    /// (its full path, below the table it is written in), in file order.
    private static func scan(_ text: [UInt8], keys: Bool, _ visit: (_ path: [String], _ line: Int) -> Void) {
        var table: [String] = []
        var openDelimiter: UInt8? = nil  // inside a multi-line string opened by """ or '''
        var start = 0
        var number = 0
        while start <= text.count {
            number += 1
            var end = start
            while end < text.count && text[end] != 0x0A { end += 1 }
            defer { start = end + 1 }
            var cursor = start
            while cursor < end && (text[cursor] == 0x20 || text[cursor] == 0x09) { cursor += 1 }
            if let delimiter = openDelimiter {
                if countTriples(text, cursor, end, delimiter) % 2 == 1 { openDelimiter = nil }
                continue
            }
            guard cursor < end else { continue }
            if text[cursor] == UInt8(ascii: "[") {
                guard cursor + 1 < end, text[cursor + 1] != UInt8(ascii: "[") else { continue }
                var position = cursor + 1
                if let path = parseKeyPath(text, &position, end), position < end, text[position] == UInt8(ascii: "]") {
                    table = path
                    visit(path, number)
                }
                continue
            }
            if keys {
                var position = cursor
                if let key = parseKeyPath(text, &position, end), position < end, text[position] == UInt8(ascii: "=") {
                    visit(table + key, number)
                }
            }
            // A value that opens a multi-line string: the lines up to its end are not keys.
            for delimiter in [UInt8(ascii: "\""), UInt8(ascii: "'")] where countTriples(text, cursor, end, delimiter) % 2 == 1 {
                openDelimiter = delimiter
            }
        }
    }

    /// Parses `a."b.c".d` up to the next `=` or `]`, skipping blanks; nil when the bytes are
    /// not a key.
    static func parseKeyPath(_ text: [UInt8], _ position: inout Int, _ end: Int) -> [String]? {
        var path: [String] = []
        while true {
            while position < end && (text[position] == 0x20 || text[position] == 0x09) { position += 1 }
            guard position < end else { return nil }
            let first = text[position]
            if first == UInt8(ascii: "\"") || first == UInt8(ascii: "'") {
                position += 1
                var key: [UInt8] = []
                while position < end && text[position] != first {
                    if first == UInt8(ascii: "\"") && text[position] == UInt8(ascii: "\\") {
                        guard let scalar = unescape(text, &position, end) else { return nil }
                        key += Array(String(Character(scalar)).utf8)
                    } else {
                        key.append(text[position])
                    }
                    position += 1
                }
                guard position < end else { return nil }
                position += 1
                path.append(String(decoding: key, as: UTF8.self))
            } else {
                let from = position
                while position < end && isBareKeyByte(text[position]) { position += 1 }
                guard position > from else { return nil }
                path.append(String(decoding: text[from..<position], as: UTF8.self))
            }
            while position < end && (text[position] == 0x20 || text[position] == 0x09) { position += 1 }
            guard position < end, text[position] == UInt8(ascii: ".") else { return path }
            position += 1
        }
    }

    private static func firstNULLine(_ text: [UInt8]) -> Int? {
        let backslash = UInt8(ascii: "\\")
        let escapes = ["u0000", "U00000000", "x00"].map { Array($0.utf8) }
        var found = text.firstIndex(of: 0) ?? text.count
        var index = 0
        while let start = text[index..<found].firstIndex(of: backslash) {
            var end = start
            while end < text.count && text[end] == backslash { end += 1 }
            if (end - start) % 2 == 1, escapes.contains(where: { text[end...].starts(with: $0) }) {
                found = start
                break
            }
            index = min(end, found)
        }
        guard found < text.count else { return nil }
        return text[..<found].count { $0 == 0x0A } + 1
    }

    /// The character an escape in a basic string stands for (`\n`, `\u00E9`, ...), leaving
    /// `position` on the escape's last byte; nil when it is not a TOML escape.
    static func unescape(_ text: [UInt8], _ position: inout Int, _ end: Int) -> Unicode.Scalar? {
        position += 1
        guard position < end else { return nil }
        let digits: Int
        switch text[position] {
        case UInt8(ascii: "b"): return "\u{08}"
        case UInt8(ascii: "t"): return "\t"
        case UInt8(ascii: "n"): return "\n"
        case UInt8(ascii: "f"): return "\u{0C}"
        case UInt8(ascii: "r"): return "\r"
        case UInt8(ascii: "e"): return "\u{1B}"
        case UInt8(ascii: "\""): return "\""
        case UInt8(ascii: "\\"): return "\\"
        case UInt8(ascii: "x"): digits = 2
        case UInt8(ascii: "u"): digits = 4
        case UInt8(ascii: "U"): digits = 8
        default: return nil
        }
        let hex = text[(position + 1)..<min(position + 1 + digits, end)]
        guard hex.count == digits, hex.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x66) }),
              let value = UInt32(String(decoding: hex, as: UTF8.self), radix: 16)
        else { return nil }
        position += digits
        return Unicode.Scalar(value)
    }

    /// A-Z a-z 0-9 _ -: the bytes of a bare TOML key.
    static func isBareKeyByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "_"), UInt8(ascii: "-"):
            return true
        default:
            return false
        }
    }

    /// How many runs of three `delimiter` bytes stand between `from` and `end`.
    static func countTriples(_ text: [UInt8], _ from: Int, _ end: Int, _ delimiter: UInt8) -> Int {
        var count = 0
        var index = from
        while index + 2 < end {
            if text[index] == delimiter && text[index + 1] == delimiter && text[index + 2] == delimiter {
                count += 1
                index += 3
            } else {
                index += 1
            }
        }
        return count
    }

    private static func contains(_ text: [UInt8], _ from: Int, _ end: Int, _ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, end - from >= needle.count else { return false }
        for start in from...(end - needle.count) where text[start] == needle[0] {
            if text[start..<start + needle.count].elementsEqual(needle) { return true }
        }
        return false
    }
}
