import Foundation
@testable import PinproxyPolicy
import XCTest

/// The key declarations (`ConfigSchema`) are the one list of config keys: config/pinproxy.toml,
/// the key tables of docs/configuration.md and pinproxy.toml(5) are generated from them, and a
/// declared default is what an unwritten key gets.
final class ConfigSchemaTests: XCTestCase {
    /// config/pinproxy.toml, the key tables of docs/configuration.md and the reason table of
    /// docs/trust-decisions.md are what `pinproxy generate-docs` makes of the declarations.
    func testTheGeneratedFilesAreTheDeclarations() throws {
        for file in GeneratedDocs.files {
            let committed = try String(contentsOf: packageRoot.appendingPathComponent(file.path), encoding: .utf8)
            let generated = try XCTUnwrap(file.render(committed), "\(file.path): a generated table's heading is missing")
            XCTAssertTrue(generated == committed, "\(file.path) is not what the declarations give: run `pinproxy generate-docs` and review the diff\n"
                          + Self.firstDifference(generated, committed))
        }
    }

    /// A committed text with one row changed (a value, a name, a restart-only mark, a reason's
    /// status) differs from the generated one: the test above can fail.
    func testAChangedRowIsADifference() throws {
        let changes: [String: [(String, String)]] = [
            "docs/configuration.md": [("| idle_timeout | seconds, more than 0 and at most 86400 | `300` |", "| idle_timeout | seconds, more than 0 and at most 86400 | `30` |"),
                                      ("| block_quic |", "| block_udp |"), ("| require_web_pki_profile |", "| require_webpki_profile |"),
                                      ("| event loops; restart-only |", "| event loops |")],
            "config/pinproxy.toml": [("# idle_timeout = 300\n", "# idle_timeout = 30\n"), ("# block_quic = true", "# block_udp = true")],
            "docs/trust-decisions.md": [("| pin-mismatch | 403 |", "| pin-mismatch | 502 |")],
        ]
        for file in GeneratedDocs.files {
            let committed = try String(contentsOf: packageRoot.appendingPathComponent(file.path), encoding: .utf8)
            for (old, new) in changes[file.path] ?? [] {
                XCTAssertTrue(committed.contains(old), "\(file.path): \(old)")
                let changed = committed.replacingOccurrences(of: old, with: new)
                XCTAssertNotEqual(file.render(changed), changed, "\(file.path): \(new)")
            }
        }
    }

    /// The reference config loads, and gives exactly the built-in config.
    func testTheReferenceConfigIsTheBuiltInOne() throws {
        let reference = try ConfigLoader.load(text: ConfigReference.toml, path: "pinproxy.toml", directory: "/", now: evaluationTime)
        let empty = try ConfigLoader.load(text: "", path: "empty.toml", directory: "/", now: evaluationTime)
        XCTAssertEqual(Self.values(reference), Self.values(empty))
        XCTAssertTrue(reference.warnings.isEmpty, "\(reference.warnings)")
        // Every key is written, with its default or an example.
        for key in ConfigReference.tables.flatMap(\.keys) {
            XCTAssertTrue(ConfigReference.toml.contains("\n# \(key.name) = "), key.name)
            if case .unset = key.defaultValue { XCTAssertNotNil(key.example, "\(key.section).\(key.name) has no default: it needs an example") }
        }
    }

    /// Uncommenting every key of the reference config (its examples included) gives a config
    /// that loads: the examples are valid values.
    func testTheReferenceExamplesAreValid() throws {
        for table in ConfigReference.tables where !table.keys.isEmpty {
            var text = table.header.replacingOccurrences(of: "SELECTOR", with: "uid:4242").replacingOccurrences(of: "[default]", with: "[hosts.\"api.test\"]") + "\n"
            // Keys that need files, or other keys, to be valid are left out.
            for key in table.keys where !["client_certificate", "client_key", "crls", "verify_command", "expires"].contains(key.name) {
                switch key.defaultValue {
                case .value(let value): text += "\(key.name) = \(value)\n"
                case .unset: text += "\(key.name) = \(key.example ?? "")\n"
                }
            }
            if table.header == "[proxy]" { text += "[capture]\nports = [443]\n" }
            XCTAssertNoThrow(try ConfigLoader.load(text: text, path: "c.toml", directory: "/", now: evaluationTime), text)
        }
    }

    /// The man page names every key.
    func testTheManPageNamesEveryKey() {
        let page = GeneratedDocs.manPage(version: "0.0.0", date: "2026-01-01")
        XCTAssertTrue(page.hasPrefix(".TH PINPROXY.TOML 5 "))
        for key in ConfigReference.tables.flatMap(\.keys) {
            XCTAssertTrue(page.contains("\\fB\(ConfigReference.roff(key.name))\\fR"), key.name)
        }
    }

    static func firstDifference(_ a: String, _ b: String) -> String {
        let left = a.split(separator: "\n", omittingEmptySubsequences: false), right = b.split(separator: "\n", omittingEmptySubsequences: false)
        for (index, (x, y)) in zip(left, right).enumerated() where x != y { return "line \(index + 1): generated \"\(x)\", committed \"\(y)\"" }
        return "generated \(left.count) lines, committed \(right.count)"
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
        var values = ConfigDefaultsTests.fields(config.proxy, ConfigSchema.proxy).mapKeys { "proxy." + $0 }
        values.merge(ConfigDefaultsTests.fields(config.capture, ConfigSchema.capture).mapKeys { "capture." + $0 }) { $1 }
        let settings = config.policies.defaultEntry.policy.settings
        values.merge(ConfigDefaultsTests.policyValues(settings).mapKeys { "default." + $0 }) { $1 }
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
