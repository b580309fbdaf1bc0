import Foundation

/// Where each table header and key sits in a TOML text, so that semantic errors found after
/// TOMLKit has parsed the document can name a line. It reads only headers and key names,
/// never values, and scans bytes. Table headers are indexed at once (every entry needs its
/// line); keys only when a diagnostic first asks for one.
final class SourceIndex: @unchecked Sendable {
    private let text: [UInt8]
    /// Offsets where each line starts.
    private let lineStarts: [Int]
    /// Header lines.
    private let headers: Lines
    /// Header and key lines, built on first use (by whichever thread asks first).
    private var builtKeys: Lines?
    private let keysLock = NSLock()
    private var keys: Lines {
        keysLock.lock()
        defer { keysLock.unlock() }
        if let builtKeys { return builtKeys }
        let built = Lines(text, withKeys: true)
        builtKeys = built
        return built
    }

    private static let separator = "\u{1F}"

    init(_ source: String) {
        text = Array(source.utf8)
        var starts = [0]
        for (offset, byte) in text.enumerated() where byte == 0x0A { starts.append(offset + 1) }
        lineStarts = starts
        headers = Lines(text, withKeys: false)
    }

    /// The line of a header or key; for a path never written itself (an implicit table), the
    /// first line written below it; else its parent's line; else 1.
    func line(of path: [String]) -> Int {
        let key = path.joined(separator: Self.separator)
        if let line = headers.lines[key] ?? keys.lines[key] { return line }
        let prefix = key + Self.separator
        if let first = keys.lines.filter({ $0.key.hasPrefix(prefix) }).map(\.value).min() { return first }
        return path.isEmpty ? 1 : line(of: Array(path.dropLast()))
    }

    /// The line, from the line of `path` up to the next header or key, on which `literal` first
    /// appears (an array element written on its own line); the line of `path` when not found.
    func line(of path: [String], containing literal: String) -> Int {
        let start = line(of: path)
        let needle = Array(literal.utf8)
        var number = start
        while number <= lineStarts.count {
            if number > start && keys.numbers.contains(number) { break }
            let from = lineStarts[number - 1]
            var end = from
            while end < text.count && text[end] != 0x0A { end += 1 }
            if Self.contains(text, from, end, needle) { return number }
            number += 1
        }
        return start
    }

    /// One scan of the text: the line of every table header, and of every key if asked.
    private struct Lines {
        /// Line numbers by path, the path's components joined with U+001F.
        var lines: [String: Int] = [:]
        /// Every recorded line, for bounding element searches.
        var numbers: Set<Int> = []

        init(_ text: [UInt8], withKeys: Bool) {
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
                    if SourceIndex.countTriples(text, cursor, end, delimiter) % 2 == 1 { openDelimiter = nil }
                    continue
                }
                guard cursor < end else { continue }
                if text[cursor] == UInt8(ascii: "[") {
                    guard cursor + 1 < end, text[cursor + 1] != UInt8(ascii: "[") else { continue }
                    var position = cursor + 1
                    if let path = SourceIndex.parseKeyPath(text, &position, end), position < end, text[position] == UInt8(ascii: "]") {
                        table = path
                        record(path, number)
                    }
                    continue
                }
                if withKeys {
                    var position = cursor
                    if let key = SourceIndex.parseKeyPath(text, &position, end), position < end, text[position] == UInt8(ascii: "=") {
                        record(table + key, number)
                    }
                }
                // A value that opens a multi-line string: the lines up to its end are not keys.
                for delimiter in [UInt8(ascii: "\""), UInt8(ascii: "'")] where SourceIndex.countTriples(text, cursor, end, delimiter) % 2 == 1 {
                    openDelimiter = delimiter
                }
            }
        }

        private mutating func record(_ path: [String], _ number: Int) {
            let key = path.joined(separator: SourceIndex.separator)
            if lines[key] == nil { lines[key] = number }
            numbers.insert(number)
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
                    if first == UInt8(ascii: "\"") && text[position] == UInt8(ascii: "\\") && position + 1 < end {
                        position += 1
                        switch text[position] {
                        case UInt8(ascii: "n"): key.append(0x0A)
                        case UInt8(ascii: "t"): key.append(0x09)
                        default: key.append(text[position])
                        }
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
