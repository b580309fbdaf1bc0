/// The text forms of IP addresses exactly as glibc's `inet_pton` and `inet_ntop` read and write
/// them (resolv/inet_pton.c, resolv/inet_ntop.c), so that no C call is needed for a value type.
/// IPAddressTextTests compares both with the C library's on every form and on random text.
enum IPAddressText {
    /// Dotted IPv4: exactly four decimal parts of 0 to 255, without leading zeros.
    static func parseIPv4(_ text: ArraySlice<UInt8>) -> [UInt8]? {
        var result: [UInt8] = [0]
        var sawDigit = false
        for character in text {
            if let digit = decimalValue(character) {
                let value = Int(result[result.count - 1]) * 10 + digit
                if sawDigit && result[result.count - 1] == 0 { return nil }
                if value > 255 { return nil }
                result[result.count - 1] = UInt8(value)
                sawDigit = true
            } else if character == UInt8(ascii: "."), sawDigit {
                if result.count == 4 { return nil }
                result.append(0)
                sawDigit = false
            } else {
                return nil
            }
        }
        return result.count == 4 && sawDigit ? result : nil
    }

    /// IPv6: up to eight groups of one to four hex digits, at most one `::`, and optionally
    /// dotted IPv4 for the last 32 bits.
    static func parseIPv6(_ text: ArraySlice<UInt8>) -> [UInt8]? {
        var source = text
        guard let first = source.first else { return nil }
        if first == UInt8(ascii: ":") {
            source = source.dropFirst()
            guard source.first == UInt8(ascii: ":") else { return nil }
        }
        var result: [UInt8] = []
        var gap: Int?
        var tokenStart = source.startIndex
        var digits = 0
        var value = 0
        var index = source.startIndex
        while index < source.endIndex {
            let character = source[index]
            index += 1
            if let digit = hexValue(character) {
                if digits == 4 { return nil }
                value = value << 4 | digit
                digits += 1
                continue
            }
            if character == UInt8(ascii: ":") {
                tokenStart = index
                if digits == 0 {
                    if gap != nil { return nil }
                    gap = result.count
                    continue
                } else if index == source.endIndex {
                    return nil
                }
                if result.count + 2 > 16 { return nil }
                result += [UInt8(value >> 8), UInt8(value & 0xFF)]
                digits = 0
                value = 0
                continue
            }
            if character == UInt8(ascii: "."), result.count + 4 <= 16, let v4 = parseIPv4(source[tokenStart...]) {
                result += v4
                digits = 0
                break
            }
            return nil
        }
        if digits > 0 {
            if result.count + 2 > 16 { return nil }
            result += [UInt8(value >> 8), UInt8(value & 0xFF)]
        }
        if let gap {
            // `::` stands for at least one group of zeros.
            if result.count == 16 { return nil }
            result.insert(contentsOf: [UInt8](repeating: 0, count: 16 - result.count), at: gap)
        }
        return result.count == 16 ? result : nil
    }

    static func formatIPv4(_ bytes: ArraySlice<UInt8>) -> String {
        bytes.map(String.init).joined(separator: ".")
    }

    /// Lowercase hex groups; the longest run of two or more zero groups (the first of equal
    /// ones) as `::`; dotted IPv4 for the last 32 bits of an IPv4-compatible (`::a.b.c.d`) or
    /// IPv4-mapped (`::ffff:a.b.c.d`) address.
    static func formatIPv6(_ bytes: [UInt8]) -> String {
        let words = (0..<8).map { Int(bytes[2 * $0]) << 8 | Int(bytes[2 * $0 + 1]) }
        var best: (base: Int, length: Int)?
        var current: (base: Int, length: Int)?
        for (index, word) in words.enumerated() {
            if word == 0 {
                current = current.map { ($0.base, $0.length + 1) } ?? (index, 1)
            } else if let run = current {
                if run.length > best?.length ?? 0 { best = run }
                current = nil
            }
        }
        if let run = current, run.length > best?.length ?? 0 { best = run }
        if let run = best, run.length < 2 { best = nil }

        var text = ""
        for index in 0..<8 {
            if let run = best, index >= run.base, index < run.base + run.length {
                if index == run.base { text += ":" }
                continue
            }
            if index != 0 { text += ":" }
            if index == 6, let run = best, run.base == 0, run.length == 6 || (run.length == 5 && words[5] == 0xFFFF) {
                text += formatIPv4(bytes[12...])
                break
            }
            text += String(words[index], radix: 16)
        }
        if let run = best, run.base + run.length == 8 { text += ":" }
        return text
    }

    private static func decimalValue(_ character: UInt8) -> Int? {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(character) ? Int(character - UInt8(ascii: "0")) : nil
    }

    private static func hexValue(_ character: UInt8) -> Int? {
        switch character {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return Int(character - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return Int(character - UInt8(ascii: "a")) + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return Int(character - UInt8(ascii: "A")) + 10
        default: return nil
        }
    }
}
