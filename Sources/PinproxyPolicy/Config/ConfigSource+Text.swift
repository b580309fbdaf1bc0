/// Checks on raw config text made before TOMLKit parses it. toml++ (under TOMLKit) asserts,
/// aborting the process (`check`, or the daemon on a reload), on two kinds of input that are
/// invalid TOML anyway, both found by the config fuzz target (Fuzz/regressions/config/):
/// - a raw control character (TOML allows none but tab and line breaks outside escapes);
/// - a table header whose first key does not start with a key character or a quote (`[=]`,
///   `[é]`, a `[` that ends its line);
/// - a `}` where an array expects a value (`[}]`, `[1, }]`).
/// U+0000 is left to `firstNULLine`, which also finds it as an escape.
/// A string without its closing quote is found here too, and named as such at its line (toml++
/// reads on into the next line and reports a control character or whatever follows).
extension ConfigSource {
    /// What the bracket scan can find.
    enum TextProblem: Equatable {
        case headerWithoutKey
        case braceInArray
        /// A one-line string whose closing quote is not on its line.
        case unterminatedString(quote: Character)
        /// A multi-line string still open at the end of the text.
        case unterminatedMultilineString(quote: Character)

        var message: String {
            switch self {
            case .headerWithoutKey: return "a table header must start with a key: a bare key (letters, digits, - and _) or a quoted one"
            case .braceInArray: return "an array holds } where a value should be"
            case .unterminatedString(let quote): return "unterminated string: the closing \(quote) is missing on this line"
            case .unterminatedMultilineString(let quote):
                let delimiter = String(repeating: quote, count: 3)
                return "unterminated multi-line string: the \(delimiter) that opens it here is never closed"
            }
        }
    }

    /// The first such problem: its 1-based line and a message; nil when there is none.
    static func problemBeforeParsing(_ bytes: [UInt8]) -> (line: Int, message: String)? {
        if let (line, byte) = firstControlCharacter(bytes) {
            let hex = String(byte, radix: 16, uppercase: true)
            return (line, "the config holds the control character U+\(String(repeating: "0", count: 4 - hex.count) + hex): TOML allows none but tab and line breaks (in a string, write an escape)")
        }
        if let (line, problem) = firstBracketProblem(bytes) { return (line, problem.message) }
        return nil
    }

    static func firstControlCharacter(_ bytes: [UInt8]) -> (line: Int, byte: UInt8)? {
        var line = 1
        var previous: UInt8 = 0
        for byte in bytes {
            if previous == 0x0D, byte != 0x0A { return (line, previous) }
            switch byte {
            case 0x0A: line += 1
            case 0x01...0x08, 0x0B, 0x0C, 0x0E...0x1F, 0x7F: return (line, byte)
            default: break
            }
            previous = byte
        }
        return previous == 0x0D ? (line, previous) : nil
    }

    /// The line of the first `[` or `[[` at the start of a line (outside multi-line strings)
    /// that is not followed, after blanks, by a key character, a quote or `]`, of the first `}`
    /// right after an array's `[` or `,`, or of the first string left open, whichever comes first.
    static func firstBracketProblem(_ bytes: [UInt8]) -> (line: Int, problem: TextProblem)? {
        let quote = UInt8(ascii: "\""), apostrophe = UInt8(ascii: "'"), newline = UInt8(ascii: "\n")
        let bracket = UInt8(ascii: "["), backslash = UInt8(ascii: "\\")
        func isBlank(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        func isKeyStart(_ byte: UInt8) -> Bool { isBareKeyByte(byte) || byte == UInt8(ascii: "]") || byte == quote || byte == apostrophe }
        func tripled(_ index: Int, _ byte: UInt8) -> Bool {
            index + 2 < bytes.count && bytes[index] == byte && bytes[index + 1] == byte && bytes[index + 2] == byte
        }
        var line = 1
        var index = 0
        var atLineStart = true
        var multiline: UInt8?  // the quote that closes the open multi-line string
        var multilineStart = 0  // the line it opened on
        var open: [UInt8] = []  // the brackets and braces open outside strings and comments
        var previous: UInt8 = 0  // the last byte outside blanks, line breaks and comments
        while index < bytes.count {
            let byte = bytes[index]
            if byte == newline {
                line += 1
                atLineStart = true
                index += 1
                continue
            }
            if let closing = multiline {
                if closing == quote, byte == backslash {
                    index += bytes[index + 1 < bytes.count ? index + 1 : index] == newline ? 1 : 2
                } else if tripled(index, closing) {
                    // Up to two more quotes before the closing three belong to the string.
                    var run = 3
                    while run < 5, index + run < bytes.count, bytes[index + run] == closing { run += 1 }
                    multiline = nil
                    index += run
                } else {
                    index += 1
                }
                continue
            }
            if atLineStart {
                if isBlank(byte) { index += 1; continue }
                atLineStart = false
                if byte == bracket, open.isEmpty {
                    var next = index + 1
                    if next < bytes.count, bytes[next] == bracket { next += 1 }
                    while next < bytes.count, isBlank(bytes[next]) { next += 1 }
                    if next == bytes.count || !isKeyStart(bytes[next]) { return (line, .headerWithoutKey) }
                }
            }
            let before = previous
            if !isBlank(byte), byte != UInt8(ascii: "#"), byte != UInt8(ascii: "\r") { previous = byte }
            switch byte {
            case bracket, UInt8(ascii: "{"):
                open.append(byte)
                index += 1
            case UInt8(ascii: "]"), UInt8(ascii: "}"):
                if byte == UInt8(ascii: "}"), open.last == bracket, before == bracket || before == UInt8(ascii: ",") {
                    return (line, .braceInArray)
                }
                if !open.isEmpty { open.removeLast() }
                index += 1
            case UInt8(ascii: "#"):
                while index < bytes.count, bytes[index] != newline { index += 1 }
            case quote, apostrophe:
                if tripled(index, byte) {
                    multiline = byte
                    multilineStart = line
                    index += 3
                } else {
                    index += 1
                    while index < bytes.count, bytes[index] != byte, bytes[index] != newline {
                        index += byte == quote && bytes[index] == backslash ? 2 : 1
                    }
                    guard index < bytes.count, bytes[index] == byte else {
                        return (line, .unterminatedString(quote: Character(UnicodeScalar(byte))))
                    }
                    index += 1
                }
            default:
                index += 1
            }
        }
        if let closing = multiline { return (multilineStart, .unterminatedMultilineString(quote: Character(UnicodeScalar(closing)))) }
        return nil
    }
}
