/// The few text operations pinproxy's output needs, in plain Swift: trimming, padding, fixed-width
/// numbers. They replace Foundation's `trimmingCharacters(in:)`, `padding(toLength:)` and
/// `String(format:)`, which live in the full Foundation (and pull in its ICU data, 34 MB of
/// the binary); FoundationEssentials has none of them.
extension StringProtocol {
    /// The text without the leading and trailing characters `drop` accepts.
    public func trimming(while drop: (Character) -> Bool) -> String {
        guard let first = firstIndex(where: { !drop($0) }), let last = lastIndex(where: { !drop($0) }) else { return "" }
        return String(self[first...last])
    }

    /// The text without leading and trailing white space and line ends.
    public func trimmingWhitespace() -> String {
        trimming(while: \.isWhitespace)
    }

    /// A host's text without the brackets of an IPv6 literal (`[::1]` → `::1`).
    public func trimmingBrackets() -> String {
        trimming { $0 == "[" || $0 == "]" }
    }

    /// The text padded with spaces to `width` characters (never cut).
    public func padded(to width: Int) -> String {
        count >= width ? String(self) : String(self) + String(repeating: " ", count: width - count)
    }
}

extension BinaryInteger {
    /// The number in hexadecimal, zero-padded to `digits` (`%02x`, `%04X`).
    public func hex(digits: Int, uppercase: Bool = false) -> String {
        let text = String(self, radix: 16, uppercase: uppercase)
        return text.count >= digits ? text : String(repeating: "0", count: digits - text.count) + text
    }

    /// The number in decimal, zero-padded to `digits` (`%04d`).
    public func decimal(digits: Int) -> String {
        let text = String(self)
        return text.count >= digits ? text : String(repeating: "0", count: digits - text.count) + text
    }
}

extension Double {
    /// A number of seconds as a person writes it: `5` for 5.0, `0.25` for 0.25 (the shortest
    /// text that reads back as the same number).
    public var secondsText: String {
        if self == rounded(), abs(self) < 1e15 { return String(Int64(self)) }
        return String(self)
    }

    /// The number with exactly `places` digits after the point, rounded (`%.3f`).
    public func fixed(places: Int) -> String {
        guard isFinite else { return String(self) }
        var scale: Double = 1
        for _ in 0..<places { scale *= 10 }
        let scaled = (abs(self) * scale).rounded()
        guard scaled < 9e18 else { return String(self) }
        let units = Int64(scaled)
        let whole = units / Int64(scale), fraction = units % Int64(scale)
        let sign = self < 0 && units != 0 ? "-" : ""
        return places == 0 ? "\(sign)\(whole)" : "\(sign)\(whole).\(fraction.decimal(digits: places))"
    }
}

extension StringProtocol {
    /// The text with each scalar that `replacements` names replaced by its text (escaping:
    /// `["\\": "\\\\", "\"": "\\\""]`).
    public func replacingEach(_ replacements: [Unicode.Scalar: String]) -> String {
        var result = ""
        result.reserveCapacity(utf8.count)
        for scalar in unicodeScalars {
            if let replacement = replacements[scalar] { result += replacement } else { result.unicodeScalars.append(scalar) }
        }
        return result
    }
}
