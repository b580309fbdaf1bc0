extension ConfigSource {
    /// The deepest nesting a config may have: tables, dotted key parts, inline tables and arrays.
    static let nestingLimit = 16

    /// The first line that nests deeper than `nestingLimit`, and what nests there; nil when
    /// none does.
    static func firstTooDeep(_ text: [UInt8]) -> (line: Int, what: String)? {
        var scanner = NestingScanner(text: text)
        return scanner.run()
    }
}

/// Bounds how deep a TOML text nests before TOMLKit sees it. toml++ builds and frees its tree
/// recursively and parses a long dotted key in time quadratic in its length: a header or key of
/// 100,000 parts overflows the stack and kills the process, daemon included. No pinproxy config
/// needs more than 3 levels (`[hosts."NAME"]`, `pins = […]`); the limit leaves room for any
/// sensible one.
///
/// The check reads the text once, byte by byte, skipping strings and comments. Every table
/// header, key path, inline table and array adds its levels to the table it is written in, and
/// no path may go deeper than the limit. It counts every dotted run as a key path, values
/// included: a number or time has at most two parts, so this only over-counts by a level.
private struct NestingScanner {
    let text: [UInt8]
    var index = 0
    var line = 1

    init(text: [UInt8]) {
        self.text = text
    }

    mutating func run() -> (line: Int, what: String)? {
        var tableDepth = 0
        // The depth of every open inline table and array.
        var containers: [Int] = []
        // The depth of the key (or value) just read, which a container opened next extends.
        var pending: Int?
        var lineHasContent = false
        while index < text.count {
            let byte = text[index]
            switch byte {
            case 0x20, 0x09, 0x0D:
                index += 1
                continue
            case 0x0A:
                line += 1
                index += 1
                lineHasContent = false
                if containers.isEmpty { pending = nil }
                continue
            case UInt8(ascii: "#"):
                while index < text.count && text[index] != 0x0A { index += 1 }
                continue
            case UInt8(ascii: "[") where containers.isEmpty && !lineHasContent:
                lineHasContent = true
                index += 1
                if index < text.count && text[index] == UInt8(ascii: "[") { index += 1 }
                let headerLine = line
                tableDepth = keyPath()
                if tableDepth > ConfigSource.nestingLimit { return (headerLine, "a table header") }
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                let depth = (pending ?? containers.last ?? tableDepth) + 1
                if depth > ConfigSource.nestingLimit { return (line, byte == UInt8(ascii: "[") ? "an array" : "an inline table") }
                containers.append(depth)
                pending = nil
                index += 1
            case UInt8(ascii: "]"), UInt8(ascii: "}"):
                if !containers.isEmpty { containers.removeLast() }
                pending = nil
                index += 1
            case UInt8(ascii: ","):
                pending = nil
                index += 1
            case UInt8(ascii: "\""), UInt8(ascii: "'"):
                let keyLine = line
                let depth = (containers.last ?? tableDepth) + keyPath()
                if depth > ConfigSource.nestingLimit { return (keyLine, "a key") }
                pending = depth
            default:
                if ConfigSource.isBareKeyByte(byte) {
                    let keyLine = line
                    let depth = (containers.last ?? tableDepth) + keyPath()
                    if depth > ConfigSource.nestingLimit { return (keyLine, "a key") }
                    pending = depth
                } else {
                    index += 1
                }
            }
            lineHasContent = true
        }
        return nil
    }

    /// Reads `part(.part)*` (bare words or strings, blanks around the dots) and returns how
    /// many parts it has, counting no further than one past the limit.
    mutating func keyPath() -> Int {
        var parts = 0
        while true {
            skipBlanks()
            guard index < text.count else { return parts }
            let byte = text[index]
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") {
                string()
            } else if ConfigSource.isBareKeyByte(byte) {
                while index < text.count && ConfigSource.isBareKeyByte(text[index]) { index += 1 }
            } else {
                return parts
            }
            parts += 1
            if parts > ConfigSource.nestingLimit { return parts }
            skipBlanks()
            guard index < text.count, text[index] == UInt8(ascii: ".") else { return parts }
            index += 1
        }
    }

    mutating func skipBlanks() {
        while index < text.count && (text[index] == 0x20 || text[index] == 0x09) { index += 1 }
    }

    /// Skips a basic, literal or multi-line string starting at `index`, counting its lines.
    mutating func string() {
        let quote = text[index]
        let escapes = quote == UInt8(ascii: "\"")
        let multiLine = index + 2 < text.count && text[index + 1] == quote && text[index + 2] == quote
        index += multiLine ? 3 : 1
        while index < text.count {
            let byte = text[index]
            if escapes && byte == UInt8(ascii: "\\") {
                if index + 1 < text.count && text[index + 1] == 0x0A { line += 1 }
                index += 2
                continue
            }
            if byte == 0x0A {
                // A single-line string ends at the line's end (TOMLKit reports the error).
                if !multiLine { return }
                line += 1
            }
            index += 1
            guard byte == quote else { continue }
            if !multiLine { return }
            if index + 1 < text.count && text[index] == quote && text[index + 1] == quote {
                index += 2
                // Up to two more quotes belong to the content: `""""` ends with a quote.
                var extra = 0
                while extra < 2 && index < text.count && text[index] == quote {
                    index += 1
                    extra += 1
                }
                return
            }
        }
    }
}
