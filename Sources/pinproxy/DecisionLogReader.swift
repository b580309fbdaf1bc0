import FoundationEssentials
import PinproxyCore
import PinproxyPolicy

/// Reads pinproxy's decision lines (logfmt or JSON, as the daemon writes them, with or
/// without a journald `<N>` priority prefix) back into decisions.
enum DecisionLogReader {
    /// One `event=connection` line with certificates: who connected where, when, what the
    /// server presented, and the path OpenSSL verified.
    struct Decision {
        var time: String
        var host: String
        var port: UInt16
        var entry: String
        var outcome: String
        var reason: String?
        var detail: String
        /// `verified_pins`: the path OpenSSL verified, leaf to anchor. nil when the line has none
        /// (no path was verified, or an older pinproxy wrote it) or one that is not a list of pins.
        var verifiedPins: [Pin]?
        /// Subjects by pin, for comments only: from JSON's `verified_chain`, or from the
        /// presented chain where one certificate alone carries the pin. logfmt's `chain` is text
        /// a subject can imitate, so it never supplies a pin.
        var subjects: [Pin: String]
    }

    /// The decision a line records, when it is an `event=connection` line with certificates;
    /// nil for any other line.
    static func decision(of rawLine: Substring) -> Decision? {
        var line = rawLine.drop { $0 == " " || $0 == "\t" }
        if line.first == "<", let close = line.firstIndex(of: ">"), line.distance(from: line.startIndex, to: close) <= 4,
           line[line.index(after: line.startIndex)..<close].allSatisfy(\.isNumber) {
            line = line[line.index(after: close)...]
        }
        if line.first == "{" { return jsonDecision(line) }
        guard let fields = logfmt(line) else { return nil }
        let presented = fields["chain"].map(parseChain) ?? []
        let verified = fields["verified_pins"].map { text in text.split(separator: ",", omittingEmptySubsequences: false).map { Pin(String($0)) } }
        return decision(fields, presented: presented, verifiedPins: verified, verifiedChain: [])
    }

    /// A JSON line: `presented_chain` and `verified_chain` are arrays of `{"subject", "spki"}`,
    /// `verified_pins` an array of pins; an older line has a `chain` text instead.
    static func jsonDecision(_ line: Substring) -> Decision? {
        guard let object = (try? JSONDecoder().decode(JSONValue.self, from: Data(line.utf8)))?.object else { return nil }
        let fields = object.compactMapValues(\.scalarText)
        func certificates(_ key: String) -> [(subject: String, pin: Pin)]? {
            guard let elements = object[key]?.array else { return nil }
            return elements.compactMap { certificate in
                guard let subject = certificate["subject"]?.string, let spki = certificate["spki"]?.string,
                      let pin = Pin(spki) else { return nil }
                return (subject, pin)
            }
        }
        let presented = certificates("presented_chain") ?? fields["chain"].map(parseChain) ?? []
        let verified = object["verified_pins"]?.array.map { $0.map { $0.string.flatMap(Pin.init) } }
        return decision(fields, presented: presented, verifiedPins: verified, verifiedChain: certificates("verified_chain") ?? [])
    }

    /// The decision of a line's `fields`, with what it says about certificates: `verifiedPins`
    /// as read (nil elements did not parse), and the subjects of `verifiedChain` (JSON) or else
    /// of `presented`.
    private static func decision(_ fields: [String: String], presented: [(subject: String, pin: Pin)],
                                 verifiedPins: [Pin?]?, verifiedChain: [(subject: String, pin: Pin)]) -> Decision? {
        guard fields["event"] == "connection", let host = fields["host"], let portText = fields["port"],
              let port = UInt16(portText), let outcome = fields["outcome"], !presented.isEmpty else { return nil }
        var pins: [Pin]? = nil
        if let verifiedPins, !verifiedPins.isEmpty, !verifiedPins.contains(nil) { pins = verifiedPins.compactMap { $0 } }
        var subjects: [Pin: String] = [:]
        let named = verifiedChain.isEmpty ? presented : verifiedChain
        for (pin, carriers) in Dictionary(grouping: named, by: \.pin) where carriers.count == 1 {
            subjects[pin] = carriers[0].subject
        }
        return Decision(time: fields["time"] ?? "", host: host, port: port, entry: fields["entry"] ?? "-",
                        outcome: outcome, reason: fields["reason"], detail: fields["detail"] ?? "",
                        verifiedPins: pins, subjects: subjects)
    }

    /// `SUBJECT sha256/PIN | SUBJECT sha256/PIN …`. A subject may itself hold ` | `, so each
    /// element is found by the pin that ends it.
    static func parseChain(_ text: String) -> [(subject: String, pin: Pin)] {
        var result: [(String, Pin)] = []
        var rest = Substring(text)
        while let marker = rest.firstRange(of: " sha256/") {
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
                        value.append(contentsOf: ("\\u" + unit.hex(digits: 4)).unicodeScalars)
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
}
