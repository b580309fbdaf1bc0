import Foundation
import PinproxyPolicy

/// Reads pinproxy's decision lines (logfmt or JSON, as the daemon writes them, with or
/// without a journald `<N>` priority prefix) back into fields.
enum DecisionLogReader {
    /// One `event=connection` line: who connected where, when, and what the server presented.
    struct Decision {
        var time: String
        var host: String
        var port: UInt16
        var entry: String
        var outcome: String
        var reason: String?
        var detail: String
        /// The presented chain, leaf first: each certificate's subject and public-key pin.
        var chain: [(subject: String, pin: Pin)]
    }

    /// The fields of one line, or nil when it is neither a logfmt nor a JSON line.
    static func fields(of rawLine: Substring) -> [String: String]? {
        var line = rawLine.drop { $0 == " " || $0 == "\t" }
        if line.first == "<", let close = line.firstIndex(of: ">"), line.distance(from: line.startIndex, to: close) <= 4,
           line[line.index(after: line.startIndex)..<close].allSatisfy(\.isNumber) {
            line = line[line.index(after: close)...]
        }
        if line.first == "{" { return json(line) }
        return logfmt(line)
    }

    /// The decision a line records, when it is an `event=connection` line with a chain.
    static func decision(_ fields: [String: String]) -> Decision? {
        guard fields["event"] == "connection", let host = fields["host"], let portText = fields["port"],
              let port = UInt16(portText), let outcome = fields["outcome"], let chainText = fields["chain"] else { return nil }
        let chain = parseChain(chainText)
        guard !chain.isEmpty else { return nil }
        return Decision(time: fields["time"] ?? "", host: host, port: port, entry: fields["entry"] ?? "-",
                        outcome: outcome, reason: fields["reason"], detail: fields["detail"] ?? "", chain: chain)
    }

    /// `SUBJECT sha256/PIN | SUBJECT sha256/PIN …`. A subject may itself hold ` | `, so each
    /// element is found by the pin that ends it.
    static func parseChain(_ text: String) -> [(subject: String, pin: Pin)] {
        var result: [(String, Pin)] = []
        var rest = Substring(text)
        while let marker = rest.range(of: " sha256/") {
            let pinEnd = rest.index(marker.upperBound, offsetBy: 44, limitedBy: rest.endIndex) ?? rest.endIndex
            let pinText = rest[rest.index(after: marker.lowerBound)..<pinEnd]
            let subject = rest[..<marker.lowerBound]
            guard let pin = Pin(String(pinText)) else {
                // Not a pin after all (a subject that contains " sha256/"): keep looking.
                rest = rest[marker.upperBound...]
                continue
            }
            result.append((String(subject.hasPrefix(" | ") ? subject.dropFirst(3) : subject), pin))
            rest = rest[pinEnd...]
            if rest.hasPrefix(" | ") { rest = rest.dropFirst(3) } else if !rest.isEmpty { return [] }
        }
        return rest.isEmpty ? result : []
    }

    /// `key=value key="quoted \"value\""`, with the escapes the daemon writes.
    static func logfmt(_ line: Substring) -> [String: String]? {
        var fields: [String: String] = [:]
        var scalars = Array(line.unicodeScalars)[...]
        func skipSpaces() { while scalars.first == " " { scalars = scalars.dropFirst() } }
        skipSpaces()
        while !scalars.isEmpty {
            guard let equals = scalars.firstIndex(of: "="), equals > scalars.startIndex else { return nil }
            let key = String(String.UnicodeScalarView(scalars[..<equals]))
            guard !key.contains(" ") else { return nil }
            scalars = scalars[(equals + 1)...]
            var value = String.UnicodeScalarView()
            if scalars.first == "\"" {
                scalars = scalars.dropFirst()
                var closed = false
                while let scalar = scalars.first {
                    scalars = scalars.dropFirst()
                    if scalar == "\"" { closed = true; break }
                    guard scalar == "\\" else { value.append(scalar); continue }
                    guard let escaped = scalars.first else { return nil }
                    scalars = scalars.dropFirst()
                    switch escaped {
                    case "n": value.append("\n")
                    case "r": value.append("\r")
                    case "t": value.append("\t")
                    case "u":
                        guard scalars.count >= 4, let unit = UInt32(String(String.UnicodeScalarView(scalars.prefix(4))), radix: 16) else { return nil }
                        scalars = scalars.dropFirst(4)
                        // Escaped controls and format characters are kept escaped: a suggestion
                        // never needs them, and they must not reach a comment as real characters.
                        value.append(contentsOf: String(format: "\\u%04x", unit).unicodeScalars)
                    default: value.append(escaped)
                    }
                }
                guard closed else { return nil }
            } else {
                while let scalar = scalars.first, scalar != " " {
                    value.append(scalar)
                    scalars = scalars.dropFirst()
                }
            }
            fields[key] = String(value)
            skipSpaces()
        }
        return fields.isEmpty ? nil : fields
    }

    static func json(_ line: Substring) -> [String: String]? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return nil }
        var fields: [String: String] = [:]
        for (key, value) in object {
            if let text = value as? String { fields[key] = text } else { fields[key] = "\(value)" }
        }
        return fields
    }
}
