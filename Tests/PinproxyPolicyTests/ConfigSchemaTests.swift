import Foundation
@testable import PinproxyPolicy
import XCTest

/// The key declarations (`ConfigSchema`) are the one list of config keys: the key tables of
/// docs/configuration.md are rendered from them, config/pinproxy.toml writes every key of them
/// with its declared default, and a declared default is what an unwritten key gets.
final class ConfigSchemaTests: XCTestCase {
    /// Each table of docs/configuration.md: the heading it follows and its declarations.
    static let documentedTables: [(heading: String, keys: [ConfigKeyDeclaration])] = [
        ("## `[proxy]`", ConfigSchema.proxy.declarations),
        ("## `[capture]`", ConfigSchema.capture.declarations),
        ("## Policy keys", ConfigSchema.policy.declarations),
        ("## Policy per client: `[clients]`", ConfigSchema.clients.declarations),
    ]

    /// What the meaning column adds after a key's doc for when a new value takes effect.
    static func effectMark(_ effect: ConfigEffect) -> String {
        switch effect {
        case .reload: ""
        case .restart: "; restart-only"
        case .egressApply: "; applied by `pinproxy egress apply`"
        }
    }

    /// A table of docs/configuration.md as the declarations give it.
    static func table(_ keys: [ConfigKeyDeclaration]) -> String {
        var lines = ["| key | values | default | meaning |", "|---|---|---|---|"]
        for key in keys {
            let defaultValue = switch key.defaultValue {
            case .value(let value): "`\(value)`"
            case .unset(let words): words
            }
            lines.append("| \(key.name) | \(key.values.replacingOccurrences(of: "|", with: "\\|")) | \(defaultValue) | \(key.doc)\(effectMark(key.effect)) |")
        }
        return lines.joined(separator: "\n")
    }

    /// The first table after `heading` in `markdown`; nil when there is none before the next
    /// heading of its level.
    static func table(after heading: String, in markdown: String) -> String? {
        let lines = markdown.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard let start = lines.firstIndex(of: heading) else { return nil }
        var table: [String] = []
        for line in lines[(start + 1)...] {
            if line.hasPrefix("## ") { break }
            if line.hasPrefix("|") { table.append(line) } else if !table.isEmpty { break }
        }
        return table.isEmpty ? nil : table.joined(separator: "\n")
    }

    /// With PINPROXY_WRITE_DOCS=1 in its environment, the test rewrites the tables instead.
    func testTheDocsKeyTablesAreTheDeclarations() throws {
        let url = packageRoot.appendingPathComponent("docs/configuration.md")
        var docs = try String(contentsOf: url, encoding: .utf8)
        if ProcessInfo.processInfo.environment["PINPROXY_WRITE_DOCS"] == "1" {
            for (heading, keys) in Self.documentedTables {
                guard let start = docs.range(of: "\n" + heading + "\n"), let written = Self.table(after: heading, in: docs),
                      let range = docs.range(of: written, range: start.upperBound..<docs.endIndex) else { continue }
                docs.replaceSubrange(range, with: Self.table(keys))
            }
            try docs.write(to: url, atomically: true, encoding: .utf8)
        }
        XCTAssertNil(Self.tableDifference(docs), "docs/configuration.md")
    }

    /// A docs text with one row changed (a value, a name, a restart-only mark) fails the
    /// comparison (the test above can fail).
    func testAChangedRowIsADifference() throws {
        let docs = try String(contentsOf: packageRoot.appendingPathComponent("docs/configuration.md"), encoding: .utf8)
        for (old, new) in [("| idle_timeout | seconds, more than 0 and at most 86400 | `300` |", "| idle_timeout | seconds, more than 0 and at most 86400 | `30` |"),
                           ("| block_quic |", "| block_udp |"), ("| require_web_pki_profile |", "| require_webpki_profile |"),
                           ("| event loops; restart-only |", "| event loops |"),
                           ("| reports a minute, all hosts together |", "| reports a minute, all hosts together; restart-only |")] {
            XCTAssertTrue(docs.contains(old), old)
            XCTAssertNotNil(Self.tableDifference(docs.replacingOccurrences(of: old, with: new)), new)
        }
    }

    /// The first table of `docs` that differs from its declarations, and the table it should be.
    static func tableDifference(_ docs: String) -> String? {
        for (heading, keys) in documentedTables {
            let expected = table(keys)
            let written = table(after: heading, in: docs)
            if written != expected {
                return "the table under \(heading) is not the declarations' (ConfigSchema); it should be:\n\(expected)"
            }
        }
        return nil
    }

    // MARK: The reference config

    /// A `key = value` line of config/pinproxy.toml, commented out or not.
    struct WrittenKey {
        let section: String
        let name: String
        let value: String
        let commented: Bool
        let line: Int
    }

    /// Every `key = value` line of `text` with the table it is written under (commented-out
    /// headers such as `# [capture]` count), and the policy keys its comment block describes.
    static func reference(_ text: String) -> (keys: [WrittenKey], described: [String: String]) {
        var section = ""
        var keys: [WrittenKey] = []
        var described: [String: String] = [:]
        var describing: String?
        let header = /^(?:# )?\[([a-z]+)(?:\.\"[^\"]*\")?\]/
        let key = /^(# )?([a-z_]+) = (.*?)(?:\s+#.*)?$/
        let policyEntry = /^# ([a-z_]+)(?: +(.*))?$/
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            if let match = line.prefixMatch(of: header) { section = String(match.1) }
            if line.hasPrefix("# Policy keys, valid here") { describing = "" }
            if line.hasPrefix("# Host patterns:") { describing = nil }
            if let name = describing {
                if let match = line.wholeMatch(of: policyEntry), line.count > 2, line.dropFirst(2).first != " " {
                    describing = String(match.1)
                    described[String(match.1)] = String(match.2 ?? "")
                } else if !name.isEmpty {
                    described[name, default: ""] += " " + line.dropFirst(1).trimmingCharacters(in: .whitespaces)
                }
                continue
            }
            if let match = line.wholeMatch(of: key) {
                keys.append(WrittenKey(section: section, name: String(match.2), value: String(match.3), commented: match.1 != nil, line: index + 1))
            }
        }
        return (keys, described)
    }

    func testTheReferenceConfigWritesEveryDeclaredKeyWithItsDefault() throws {
        let text = try String(contentsOf: packageRoot.appendingPathComponent("config/pinproxy.toml"), encoding: .utf8)
        XCTAssertEqual(Self.referenceDifferences(text), [])
    }

    /// A reference with a key left out, an undeclared one, or a default that is not the declared
    /// one fails the comparison.
    func testAChangedReferenceIsADifference() throws {
        let text = try String(contentsOf: packageRoot.appendingPathComponent("config/pinproxy.toml"), encoding: .utf8)
        for (old, new) in [("# idle_timeout = 300 ", "# idle_timeout = 30 "), ("# block_quic = true", "# block_udp = true"),
                           ("allow_ports = [443]\n", "allow_ports = [443, 8443]\n"), ("# min_tls            \"1.2\" (default)", "# min_tls            \"1.3\" (default)"),
                           ("# crls ", "# crl_files "), ("# allow = [\"git.example.com\"]", "# allowed = [\"git.example.com\"]")] {
            XCTAssertTrue(text.contains(old), old)
            XCTAssertNotEqual(Self.referenceDifferences(text.replacingOccurrences(of: old, with: new)), [], new)
        }
    }

    /// How the reference config `text` differs from the declarations: a key of `[proxy]`,
    /// `[capture]` or `[clients]` not written or not declared, a policy key not described or not
    /// declared, and a default written (`key = value` in `[proxy]` and `[capture]`, an active
    /// line in `[default]`, "VALUE (default" in the policy block) that is not the declared one.
    static func referenceDifferences(_ text: String) -> [String] {
        let (keys, described) = reference(text)
        var differences: [String] = []
        let sections: [(name: String, keys: [ConfigKeyDeclaration], checksDefaults: Bool)] = [
            ("proxy", ConfigSchema.proxy.declarations, true),
            ("capture", ConfigSchema.capture.declarations, true),
            ("clients", ConfigSchema.clients.declarations, false),
        ]
        for section in sections {
            let written = keys.filter { $0.section == section.name }
            let names = Set(written.map(\.name)), declared = Set(section.keys.map(\.name))
            for name in declared.subtracting(names).sorted() { differences.append("[\(section.name)] does not write \(name)") }
            for name in names.subtracting(declared).sorted() { differences.append("[\(section.name)] writes \(name), which is not declared") }
            guard section.checksDefaults else { continue }
            for key in written {
                guard case .value(let value) = section.keys.first(where: { $0.name == key.name })?.defaultValue, key.value != value else { continue }
                differences.append("line \(key.line): \(key.name) = \(key.value), but its declared default is \(value)")
            }
        }
        let policy = ConfigSchema.policy.declarations
        for key in keys where ["default", "hosts"].contains(key.section) {
            guard let declared = policy.first(where: { $0.name == key.name }) else {
                differences.append("line \(key.line): \(key.name) is not a declared policy key")
                continue
            }
            if key.section == "default", !key.commented, case .value(let value) = declared.defaultValue, key.value != value {
                differences.append("line \(key.line): [default] writes \(key.name) = \(key.value), but its declared default is \(value)")
            }
        }
        let names = Set(described.keys), declared = Set(policy.map(\.name))
        for name in declared.subtracting(names).sorted() { differences.append("the policy keys' comment block does not describe \(name)") }
        for name in names.subtracting(declared).sorted() { differences.append("the policy keys' comment block describes \(name), which is not declared") }
        for key in policy {
            guard case .value(let value) = key.defaultValue, let description = described[key.name],
                  let match = description.firstMatch(of: /(\S+) \(default\b/) else { continue }
            if match.1 != value { differences.append("the comment block gives \(key.name) the default \(match.1), but its declared default is \(value)") }
        }
        for key in keys where !["proxy", "capture", "clients", "default", "hosts", "resolve"].contains(key.section) {
            differences.append("line \(key.line): \(key.name) is written under [\(key.section)], which is not a table")
        }
        return differences
    }

    // MARK: The defaults

    /// Writing a key with its declared default loads the same settings as leaving it out.
    func testADeclaredDefaultIsWhatAnUnwrittenKeyGets() throws {
        let tables: [(section: ConfigSection, header: String)] = [(.proxy, "[proxy]"), (.capture, "[capture]"), (.policy, "[default]"),
                                                                  (.clients, "[clients.\"uid:4242\"]")]
        func config(_ line: (section: ConfigSection, text: String)?) throws -> Config {
            var text = ""
            for table in tables {
                text += table.header + "\n"
                if let line, line.section == table.section { text += line.text + "\n" }
            }
            return try ConfigLoader.load(text: text, path: "c.toml", directory: "/", now: evaluationTime)
        }
        let unwritten = Self.values(try config(nil))
        for key in ConfigSchema.proxy.declarations + ConfigSchema.capture.declarations + ConfigSchema.policy.declarations + ConfigSchema.clients.declarations {
            guard case .value(let value) = key.defaultValue else { continue }
            XCTAssertEqual(Self.values(try config((key.section, "\(key.name) = \(value)"))), unwritten, "\(key.section).\(key.name) = \(value)")
        }
        // A value other than the default is seen (the comparison can fail).
        XCTAssertNotEqual(Self.values(try config((.proxy, "idle_timeout = 30"))), unwritten)
        XCTAssertNotEqual(Self.values(try config((.clients, "enforce = false"))), unwritten)
    }

    /// What a loaded config holds, as text.
    static func values(_ config: Config) -> [String: String] {
        var values = ConfigDefaultsTests.proxyValues(config.proxy).mapKeys { "proxy." + $0 }
        values["proxy.client_identity_timeout"] = "\(config.proxy.clientIdentityTimeout)"
        values["proxy.report_client_identity"] = "\(config.proxy.reportClientIdentity)"
        values.merge(ConfigDefaultsTests.captureValues(config.capture).mapKeys { "capture." + $0 }) { $1 }
        let settings = config.policies.defaultEntry.policy.settings
        values.merge(ConfigDefaultsTests.policyValues(settings).mapKeys { "default." + $0 }) { $1 }
        values["default.mode"] = settings.mode.rawValue
        values["default.client_certificate"] = "\(settings.clientIdentity != nil)"
        for section in config.clients.sections {
            values["clients.\(section.key)"] = "allow \(section.allow.map { "\($0)" } ?? "nil") deny \(section.deny) enforce \(section.enforce)"
        }
        return values
    }

    /// Of keys equally near an unknown one, the hint names those whose declared value takes the
    /// value written (`local` is a bool, `ports` an array).
    func testAHintPrefersTheKeysThatTakeTheValuesType() {
        func message(_ text: String) -> String? {
            do {
                _ = try ConfigLoader.load(text: text, path: "c.toml", directory: "/", now: evaluationTime)
                return nil
            } catch {
                return error.diagnostics.first?.message
            }
        }
        XCTAssertEqual(message("[capture]\nlocts = true\n"), "unknown key capture.locts (did you mean \"local\"?)")
        XCTAssertEqual(message("[capture]\nlocts = [80]\n"), "unknown key capture.locts (did you mean \"ports\"?)")
        XCTAssertEqual(message("[capture]\nlocts = \"x\"\n"), "unknown key capture.locts (did you mean \"ports\" or \"local\"?)")
        XCTAssertEqual(message("[default]\npinz = []\n"), "unknown key default.pinz (did you mean \"pins\"?)")
        XCTAssertEqual(message("[default]\npinz = \"none\"\n"), "unknown key default.pinz (did you mean \"pin\"?)")
    }

    func testEveryKeyIsDeclaredOnceInItsSection() {
        for (section, keys) in [(ConfigSection.proxy, ConfigSchema.proxy.declarations), (.capture, ConfigSchema.capture.declarations),
                                (.policy, ConfigSchema.policy.declarations), (.clients, ConfigSchema.clients.declarations)] {
            XCTAssertEqual(Set(keys.map(\.name)).count, keys.count, "\(section)")
            XCTAssertTrue(keys.allSatisfy { $0.section == section }, "\(section)")
        }
    }
}

private extension Dictionary where Key == String {
    func mapKeys(_ transform: (String) -> String) -> [String: Value] {
        Dictionary(uniqueKeysWithValues: map { (transform($0.key), $0.value) })
    }
}
