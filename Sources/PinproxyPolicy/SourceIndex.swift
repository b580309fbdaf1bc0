/// Where each table header and key sits in a TOML text, so that semantic errors found after
/// TOMLKit has parsed the document can name a line. It reads only headers and key names,
/// never values.
struct SourceIndex {
    private var lines: [[String]: Int] = [:]
    private var text: [Substring] = []

    init(_ source: String) {
        text = source.split(separator: "\n", omittingEmptySubsequences: false)
        var table: [String] = []
        var inMultilineString: String? = nil
        for (offset, raw) in text.enumerated() {
            let number = offset + 1
            let line = raw.drop { $0 == " " || $0 == "\t" }
            if let delimiter = inMultilineString {
                if line.components(separatedBy: delimiter).count % 2 == 0 { inMultilineString = nil }
                continue
            }
            if line.hasPrefix("[") && !line.hasPrefix("[[") {
                var cursor = line.dropFirst()
                if let path = SourceIndex.parseKeyPath(&cursor), cursor.first == "]" {
                    table = path
                    lines[path] = lines[path] ?? number
                }
                continue
            }
            var cursor = line
            if let key = SourceIndex.parseKeyPath(&cursor), cursor.first == "=" {
                let path = table + key
                lines[path] = lines[path] ?? number
                let value = cursor.dropFirst()
                for delimiter in ["\"\"\"", "'''"] where value.components(separatedBy: delimiter).count == 2 {
                    inMultilineString = delimiter
                }
            }
        }
    }

    /// The line of a header or key; for a path never written itself (an implicit table), the
    /// first line written below it; else its parent's line; else 1.
    func line(of path: [String]) -> Int {
        if let line = lines[path] { return line }
        let below = lines.filter { $0.key.count > path.count && Array($0.key.prefix(path.count)) == path }.map(\.value)
        if let first = below.min() { return first }
        return path.isEmpty ? 1 : line(of: Array(path.dropLast()))
    }

    /// The line, at or after the line of `path`, on which `literal` first appears (an array
    /// element written on its own line); the line of `path` when not found.
    func line(of path: [String], containing literal: String) -> Int {
        let start = line(of: path)
        for number in start...max(start, text.count) where number - 1 < text.count {
            if number > start, lines.values.contains(number) { break }
            if text[number - 1].contains(literal) { return number }
        }
        return start
    }

    /// Parses `a."b.c".d` up to the next `=` or `]`, skipping blanks; nil when the text is not a key.
    static func parseKeyPath(_ cursor: inout Substring) -> [String]? {
        var path: [String] = []
        while true {
            cursor = cursor.drop { $0 == " " || $0 == "\t" }
            guard let first = cursor.first else { return nil }
            if first == "\"" || first == "'" {
                cursor = cursor.dropFirst()
                var key = ""
                while let char = cursor.first, char != first {
                    cursor = cursor.dropFirst()
                    if char == "\\" && first == "\"", let escaped = cursor.first {
                        cursor = cursor.dropFirst()
                        switch escaped {
                        case "n": key.append("\n")
                        case "t": key.append("\t")
                        default: key.append(escaped)
                        }
                    } else {
                        key.append(char)
                    }
                }
                guard cursor.first == first else { return nil }
                cursor = cursor.dropFirst()
                path.append(key)
            } else {
                let bare = cursor.prefix { $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" }
                guard !bare.isEmpty, bare.allSatisfy(\.isASCII) else { return nil }
                cursor = cursor.dropFirst(bare.count)
                path.append(String(bare))
            }
            cursor = cursor.drop { $0 == " " || $0 == "\t" }
            guard cursor.first == "." else { return path }
            cursor = cursor.dropFirst()
        }
    }
}
