/// The one pass over a config's text that gives loading what TOMLKit does not give: where each
/// table header and key is written (TOMLKit's values carry no positions), how deep the text
/// nests, and the refusal of text that toml++ (under TOMLKit) would abort the process on or
/// overflow its stack with. It reads TOML's lexical structure: the four kinds of string,
/// comments, line breaks, brackets and braces, keys and table headers. It is no second parser:
/// values are skipped (TOMLKit parses them) and a syntax error is left for TOMLKit to report,
/// the lexer reading on as best it can. Refused, each at its line (all invalid TOML anyway):
/// - U+0000 as a byte or as an escape (`\u0000`, `\U00000000`, `\x00`) in a basic string or
///   quoted key: TOMLKit hands the text and every string to C, which would end it there;
/// - a raw control character other than tab and CR LF, anywhere (toml++ asserts on one after a
///   table header's `[`);
/// - a table header that does not start with a key (`[=]`, `[é]`, a `[` that ends its line) and
///   a `}` where an array expects a value (`[}]`, `[1, }]`): toml++ asserts on both;
/// - a string left open: named as such at its line (toml++ reads on and reports what follows);
/// - nesting deeper than `nestingLimit`: toml++ builds and frees its tree recursively, and
///   parses a long dotted key in time quadratic in its length.
/// The first of these in file order ends the pass.
struct ConfigLexer {
    /// The deepest nesting a config may have: tables, dotted key parts, inline tables and arrays.
    static let nestingLimit = 16

    /// Why the text must not reach TOMLKit, at a line.
    struct Refusal: Error, Equatable {
        let line: Int
        let message: String
    }

    /// A table header, `[a.b]` or `[[a.b]]`.
    struct Header {
        let path: [String]
        let line: Int
        /// `[[…]]`: an element of an array of tables.
        let isArrayElement: Bool
        /// The offset of its `[` in the text.
        let offset: Int
    }

    /// A key written at the start of a line (keys inside inline tables share their line with
    /// the key that holds them): its bytes in the text, decoded only when a line is asked for.
    struct Key {
        /// The index in `headers` of the table it is written in; -1 above the first header.
        let header: Int
        let line: Int
        let bytes: Range<Int>
    }

    private let text: [UInt8]
    private var index = 0
    private var line = 1
    private(set) var headers: [Header] = []
    private(set) var keys: [Key] = []
    /// Headers read but not in `headers` (no key path could be taken from them).
    private(set) var unrecordedHeaders = 0
    /// The number of parts of the current table's path.
    private var tableDepth = 0
    /// The depth of every array and inline table open in the statement being read.
    private var open: [(depth: Int, isArray: Bool)] = []

    /// Lexes `text` whole: its headers and keys, or the first reason to refuse it.
    static func lex(_ text: [UInt8]) -> Result<ConfigLexer, Refusal> {
        var lexer = ConfigLexer(text: text)
        do {
            while lexer.index < text.count { try lexer.statement() }
        } catch {
            return .failure(error)
        }
        return .success(lexer)
    }

    private init(text: [UInt8]) {
        self.text = text
    }

    // MARK: Statements

    /// One statement: a blank or comment line, a table header or a key with its value (to the
    /// end of the line, or of the array that value opens).
    private mutating func statement() throws(Refusal) {
        skipBlanks()
        guard index < text.count else { return }
        let byte = text[index]
        if byte == .newline {
            index += 1
            line += 1
        } else if byte == .hash {
            try comment()
        } else if byte == .openBracket {
            try header()
            try rest(owner: nil)
        } else if Self.isKeyStart(byte) {
            let keyLine = line, start = index
            let parts = try keyPath()
            let depth = tableDepth + parts
            keys.append(Key(header: headers.count - 1, line: keyLine, bytes: start..<index))
            if depth > Self.nestingLimit { throw tooDeep(keyLine, "a key") }
            try rest(owner: depth)
        } else {
            try rest(owner: nil)
        }
    }

    /// `[path]` or `[[path]]`, which the keys below belong to.
    private mutating func header() throws(Refusal) {
        let headerLine = line, headerOffset = index
        index += 1
        let isArrayElement = index < text.count && text[index] == .openBracket
        if isArrayElement { index += 1 }
        skipBlanks()
        guard index < text.count, Self.isKeyStart(text[index]) || text[index] == .closeBracket else {
            if index < text.count { try refuseControl(text[index]) }
            throw Refusal(line: headerLine, message: "a table header must start with a key: a bare key (letters, digits, - and _) or a quoted one")
        }
        let start = index
        let depth = try keyPath()
        if depth > Self.nestingLimit { throw tooDeep(headerLine, "a table header") }
        var position = start
        guard depth > 0, let path = Self.parseKeyPath(text, &position, index) else {
            unrecordedHeaders += 1
            return
        }
        tableDepth = depth
        headers.append(Header(path: path, line: headerLine, isArrayElement: isArrayElement, offset: headerOffset))
    }

    /// The rest of a statement, through its line break: values, and the arrays and inline
    /// tables they open (an array may span lines), checking the brackets, the nesting and the
    /// keys of inline tables. `owner` is the depth of the key whose value comes first.
    private mutating func rest(owner: Int?) throws(Refusal) {
        open.removeAll(keepingCapacity: true)
        /// The depth of the key just read, which an array or inline table opened next extends.
        var owner = owner
        /// After `{` or a `,` in an inline table: a key comes next.
        var expectingKey = false
        /// After `[` or a `,` in an array: a value comes next.
        var expectingElement = false
        while index < text.count {
            let byte = text[index]
            switch byte {
            case .space, .tab:
                index += 1
            case .newline:
                index += 1
                line += 1
                if open.isEmpty { return }
            case .hash:
                try comment()
            case .openBracket, .openBrace:
                let depth = (owner ?? open.last?.depth ?? tableDepth) + 1
                if depth > Self.nestingLimit { throw tooDeep(line, byte == .openBracket ? "an array" : "an inline table") }
                open.append((depth, byte == .openBracket))
                index += 1
                owner = nil
                expectingKey = byte == .openBrace
                expectingElement = byte == .openBracket
            case .closeBracket, .closeBrace:
                if byte == .closeBrace && expectingElement && open.last?.isArray == true {
                    throw Refusal(line: line, message: "an array holds } where a value should be")
                }
                if !open.isEmpty { open.removeLast() }
                index += 1
                (owner, expectingKey, expectingElement) = (nil, false, false)
            case .comma:
                index += 1
                owner = nil
                expectingKey = open.last?.isArray == false
                expectingElement = open.last?.isArray == true
            case .equals:
                index += 1
                expectingKey = false
            default:
                if expectingKey && Self.isKeyStart(byte) {
                    let keyLine = line
                    let parts = try keyPath()
                    let depth = (open.last?.depth ?? tableDepth) + parts
                    if depth > Self.nestingLimit { throw tooDeep(keyLine, "a key") }
                    owner = depth
                } else if byte == .quote || byte == .apostrophe {
                    try string()
                    owner = nil
                } else {
                    // A byte of a bare value (number, boolean, date): TOMLKit reads it.
                    try refuseControl(byte)
                    index += 1
                    owner = nil
                }
                expectingKey = false
                expectingElement = false
            }
        }
    }

    // MARK: Tokens

    /// `part.part…`, bare or quoted parts with blanks around the dots: how many parts (counting
    /// no further than one past the limit), leaving `index` after the last.
    private mutating func keyPath() throws(Refusal) -> Int {
        var parts = 0
        while index < text.count {
            let byte = text[index]
            if byte == .quote || byte == .apostrophe {
                try string()
            } else if Self.isBareKeyByte(byte) {
                while index < text.count && Self.isBareKeyByte(text[index]) { index += 1 }
            } else {
                break
            }
            parts += 1
            if parts > Self.nestingLimit { break }
            var after = index
            while after < text.count && (text[after] == .space || text[after] == .tab) { after += 1 }
            guard after < text.count, text[after] == .dot else { break }
            index = after + 1
            skipBlanks()
        }
        return parts
    }

    /// A string of any of the four kinds (basic or literal, one line or several), from its
    /// opening quote to after its closing one.
    private mutating func string() throws(Refusal) {
        let quote = text[index]
        let basic = quote == .quote
        let openingLine = line
        if tripled(quote) {
            index += 3
            while index < text.count {
                let byte = text[index]
                if byte == quote && tripled(quote) {
                    // Up to two more quotes before the closing three belong to the string.
                    var run = 3
                    while run < 5 && index + run < text.count && text[index + run] == quote { run += 1 }
                    index += run
                    return
                }
                if basic && byte == .backslash {
                    try escape()
                } else {
                    if byte == .newline { line += 1 } else { try refuseControl(byte) }
                    index += 1
                }
            }
            let delimiter = String(repeating: Character(Unicode.Scalar(quote)), count: 3)
            throw Refusal(line: openingLine, message: "unterminated multi-line string: the \(delimiter) that opens it here is never closed")
        }
        index += 1
        while index < text.count {
            let byte = text[index]
            // Most bytes: printable, and neither the quote nor a backslash.
            if byte >= 0x20 && byte != 0x7F && byte != quote && byte != .backslash {
                index += 1
                continue
            }
            if byte == quote {
                index += 1
                return
            }
            if byte == .newline || (byte == .carriageReturn && index + 1 < text.count && text[index + 1] == .newline) { break }
            if basic && byte == .backslash {
                try escape()
            } else {
                try refuseControl(byte)
                index += 1
            }
        }
        throw Refusal(line: openingLine, message: "unterminated string: the closing \(Character(Unicode.Scalar(quote))) is missing on this line")
    }

    /// An escape in a basic string, from its backslash: U+0000 written as one is refused; which
    /// escapes are valid is TOMLKit's to say. A line break after the backslash is left to the
    /// string (it counts the line, or ends a one-line string).
    private mutating func escape() throws(Refusal) {
        index += 1
        guard index < text.count else { return }
        for nul in Self.nulEscapes where text[index...].starts(with: nul) {
            throw Refusal(line: line, message: Self.nulMessage)
        }
        let byte = text[index]
        if byte == .newline || byte == .carriageReturn { return }
        try refuseControl(byte)
        index += 1
    }

    /// A comment, up to its line break.
    private mutating func comment() throws(Refusal) {
        while index < text.count && text[index] != .newline {
            try refuseControl(text[index])
            index += 1
        }
    }

    private mutating func skipBlanks() {
        while index < text.count && (text[index] == .space || text[index] == .tab) { index += 1 }
    }

    /// Whether three `quote`s start at `index`.
    private func tripled(_ quote: UInt8) -> Bool {
        index + 2 < text.count && text[index + 1] == quote && text[index + 2] == quote && text[index] == quote
    }

    // MARK: Refusals

    static let nulMessage = "the config holds U+0000 (NUL), as a byte or as an escape: pinproxy cannot read past it"
    private static let nulEscapes = ["u0000", "U00000000", "x00"].map { Array($0.utf8) }

    /// Refuses `byte`, at `index`, if it is U+0000 or a control character TOML allows nowhere
    /// (all but tab, and CR before LF). Line feeds are the caller's.
    @inline(__always)
    private func refuseControl(_ byte: UInt8) throws(Refusal) {
        guard byte < 0x20 || byte == 0x7F, byte != .tab, byte != .newline else { return }
        if byte == .carriageReturn && index + 1 < text.count && text[index + 1] == .newline { return }
        if byte == 0 { throw Refusal(line: line, message: Self.nulMessage) }
        let hex = String(byte, radix: 16, uppercase: true)
        throw Refusal(line: line, message: "the config holds the control character U+\(String(repeating: "0", count: 4 - hex.count) + hex): TOML allows none but tab and line breaks (in a string, write an escape)")
    }

    private func tooDeep(_ line: Int, _ what: String) -> Refusal {
        Refusal(line: line, message: "\(what) nests deeper than \(Self.nestingLimit) levels (tables, dotted key parts, inline tables and arrays count together); no pinproxy config needs more than 3")
    }

    // MARK: Keys

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

    static func isKeyStart(_ byte: UInt8) -> Bool {
        isBareKeyByte(byte) || byte == .quote || byte == .apostrophe
    }

    /// Decodes the key path `a."b.c".d` from `position` up to `end` (escapes in quoted parts
    /// read as TOML reads them); nil when the bytes are not a key path.
    static func parseKeyPath(_ text: [UInt8], _ position: inout Int, _ end: Int) -> [String]? {
        var path: [String] = []
        while true {
            while position < end && (text[position] == .space || text[position] == .tab) { position += 1 }
            guard position < end else { return path.isEmpty ? nil : path }
            let first = text[position]
            if first == .quote || first == .apostrophe {
                position += 1
                let from = position
                // Up to the closing quote or the first escape: most keys are taken as written.
                while position < end && text[position] != first && !(first == .quote && text[position] == .backslash) { position += 1 }
                var key = Array(text[from..<position])
                while position < end && text[position] != first {
                    if first == .quote && text[position] == .backslash {
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
            while position < end && (text[position] == .space || text[position] == .tab) { position += 1 }
            guard position < end, text[position] == .dot else { return path }
            position += 1
        }
    }

    /// The character an escape in a basic string stands for (`\n`, `\u00E9`, ...), leaving
    /// `position` on the escape's last byte; nil when it is not a TOML escape.
    private static func unescape(_ text: [UInt8], _ position: inout Int, _ end: Int) -> Unicode.Scalar? {
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
}

private extension UInt8 {
    static let tab = UInt8(ascii: "\t"), newline = UInt8(ascii: "\n"), carriageReturn = UInt8(ascii: "\r"), space = UInt8(ascii: " ")
    static let quote = UInt8(ascii: "\""), apostrophe = UInt8(ascii: "'"), backslash = UInt8(ascii: "\\"), hash = UInt8(ascii: "#")
    static let openBracket = UInt8(ascii: "["), closeBracket = UInt8(ascii: "]"), openBrace = UInt8(ascii: "{"), closeBrace = UInt8(ascii: "}")
    static let comma = UInt8(ascii: ","), equals = UInt8(ascii: "="), dot = UInt8(ascii: ".")
}
