import FoundationEssentials
import PinproxyCore
import PinproxyInterop

/// The public suffix list (publicsuffix.org), as Debian's `publicsuffix` package installs it.
/// Read at config load (start and every reload), never on an event loop, and handed to the
/// verdict with the config (`VerdictContext`).
public final class PublicSuffixList: Sendable {
    /// Where Debian's `publicsuffix` package puts the list.
    public static let systemPath = "/usr/share/publicsuffix/public_suffix_list.dat"

    private let rules: Set<String>
    /// `*.NAME` rules, stored as NAME.
    private let wildcards: Set<String>
    /// `!NAME` rules, stored as NAME.
    private let exceptions: Set<String>

    /// Parses the list's text: one rule a line, `//` comments, both sections (ICANN and private).
    public convenience init(text: String) {
        self.init(bytes: Array(text.utf8))
    }

    private init(bytes: [UInt8]) {
        var rules = Set<String>(), wildcards = Set<String>(), exceptions = Set<String>()
        for line in bytes.split(whereSeparator: { $0 == UInt8(ascii: "\n") || $0 == UInt8(ascii: "\r") }) {
            // A rule is the line's first word; comment lines start with "//".
            let word = line.prefix { $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "\t") }
            guard !word.isEmpty, !word.starts(with: "//".utf8) else { continue }
            let name = Self.asciiForm(String(decoding: word, as: UTF8.self).lowercased())
            if name.hasPrefix("!") {
                exceptions.insert(String(name.dropFirst()))
            } else if name.hasPrefix("*.") {
                wildcards.insert(String(name.dropFirst(2)))
            } else {
                rules.insert(name)
            }
        }
        (self.rules, self.wildcards, self.exceptions) = (rules, wildcards, exceptions)
    }

    /// The list writes internationalised names in Unicode; certificates and pinproxy's host
    /// names use their `xn--` form. Foundation's IDNA conversion gives it.
    private static func asciiForm(_ rule: String) -> String {
        guard !rule.utf8.allSatisfy({ $0 < 0x80 }) else { return rule }
        let prefix = rule.hasPrefix("!") ? "!" : rule.hasPrefix("*.") ? "*." : ""
        var components = URLComponents()
        components.host = String(rule.dropFirst(prefix.count))
        guard let encoded = components.encodedHost, encoded.allSatisfy(\.isASCII) else { return rule }
        return prefix + encoded.lowercased()
    }

    /// Whether `name` (lowercase or not, one trailing dot allowed) is itself a public suffix.
    /// A single label always is (the list's implicit `*` rule).
    public func isPublicSuffix(_ name: String) -> Bool {
        var name = name.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        if exceptions.contains(name) { return false }
        if rules.contains(name) { return true }
        guard let dot = name.firstIndex(of: ".") else { return true }
        return wildcards.contains(String(name[name.index(after: dot)...]))
    }

    /// Reads the list at `path`; the error says what to install when it is missing.
    public convenience init(contentsOf path: String = systemPath) throws(PublicSuffixListError) {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw PublicSuffixListError(description: "the public suffix list \(path) cannot be read: install Debian's publicsuffix package (scripts/setup does)")
        }
        self.init(bytes: Array(data))
        guard !rules.isEmpty else {
            throw PublicSuffixListError(description: "the public suffix list \(path) holds no rule")
        }
    }

    /// The list `loadSystem` read last and what identifies its file (path, modification time, size).
    private static let lastRead = Locked<(list: PublicSuffixList, stamp: String)?>(nil)

    /// Reads the system list; a file unchanged since the last read (same modification time
    /// and size) is not parsed again. The config loader calls it, off the event loop.
    public static func loadSystem(path: String = systemPath) throws(PublicSuffixListError) -> PublicSuffixList {
        let attributes = try? FileManager.default.attributesOfItem(atPath: path)
        let stamp = (attributes?[.modificationDate] as? Date).map { "\(path) \($0.timeIntervalSince1970) \(attributes?[.size] ?? 0)" }
        if let stamp, let last = lastRead.withLock({ $0 }), last.stamp == stamp { return last.list }
        let list = try PublicSuffixList(contentsOf: path)
        if let stamp { lastRead.withLock { $0 = (list, stamp) } }
        return list
    }
}

/// The public suffix list could not be read.
public struct PublicSuffixListError: Error, CustomStringConvertible {
    public let description: String
}
