import Foundation
import PinproxyInterop
@testable import PinproxyPolicy
import XCTest

/// An empty config equals the declared defaults (`ConfigSchema`): every key of `[proxy]`,
/// `[capture]` and `[clients]` holds its declaration's default, and `[default]` (and a host
/// entry that sets nothing) is the policy a table writing every declared default gives. The
/// defaults themselves live in the declarations only.
final class ConfigDefaultsTests: XCTestCase {
    func testAnEmptyConfigEqualsTheDeclaredDefaults() throws {
        let config = try ConfigLoader.load(text: "", path: "empty.toml", directory: "/", now: evaluationTime)
        XCTAssertEqual(Self.fields(config.proxy, ConfigSchema.proxy), Self.declaredDefaults(ConfigSchema.proxy))
        XCTAssertEqual(Self.fields(config.capture, ConfigSchema.capture), Self.declaredDefaults(ConfigSchema.capture))
        XCTAssertFalse(config.capture.isWritten)
        XCTAssertEqual(Self.policyValues(config.policies.defaultEntry.policy.settings), try Self.everyDefaultWritten())
        XCTAssertEqual(config.policies.entries.count, 0)
        XCTAssertTrue(config.resolve.isEmpty)
        XCTAssertTrue(config.clients.sections.isEmpty)
        XCTAssertTrue(config.warnings.isEmpty, "\(config.warnings)")
        let section = RawClientSection(key: "uid:1", line: 1, selector: .uid(1))
        XCTAssertEqual(Self.fields(section, ConfigSchema.clients), Self.declaredDefaults(ConfigSchema.clients))
    }

    /// The built-in config is the empty one.
    func testTheEmbeddedDefaultIsTheEmptyConfig() throws {
        let embedded = try ConfigLoader.loadEmbedded(now: evaluationTime)
        let empty = try ConfigLoader.load(text: "", path: "empty.toml", directory: "/", now: evaluationTime)
        XCTAssertEqual(Self.fields(embedded.proxy, ConfigSchema.proxy), Self.fields(empty.proxy, ConfigSchema.proxy))
        XCTAssertEqual(embedded.capture, empty.capture)
        XCTAssertEqual(Self.policyValues(embedded.policies.defaultEntry.policy.settings), Self.policyValues(empty.policies.defaultEntry.policy.settings))
        XCTAssertEqual(embedded.policies.entries.count, 0)
        XCTAssertEqual(embedded.policies.defaultEntry.line, 0)
    }

    /// A host entry that sets nothing has the declared defaults too.
    func testAHostEntryThatSetsNothingHasTheDefaults() throws {
        let config = try ConfigLoader.load(text: "[hosts.\"api.test\"]\n", path: "host.toml", directory: "/", now: evaluationTime)
        let entry = config.policies.lookup(.name("api.test"))
        XCTAssertEqual(entry.name, "hosts.\"api.test\"")
        XCTAssertEqual(Self.policyValues(entry.policy.settings), try Self.everyDefaultWritten())
    }

    /// A value other than the default is seen: the comparisons above can fail.
    func testAChangedValueIsADifference() throws {
        let config = try ConfigLoader.load(text: "[proxy]\nidle_timeout = 30\n[capture]\nlocal = true\n[default]\nmin_tls = \"1.3\"\n",
                                           path: "c.toml", directory: "/", now: evaluationTime)
        XCTAssertNotEqual(Self.fields(config.proxy, ConfigSchema.proxy), Self.declaredDefaults(ConfigSchema.proxy))
        XCTAssertNotEqual(Self.fields(config.capture, ConfigSchema.capture), Self.declaredDefaults(ConfigSchema.capture))
        XCTAssertNotEqual(Self.policyValues(config.policies.defaultEntry.policy.settings), try Self.everyDefaultWritten())
    }

    /// Key → its field's value in `settings`, as TOML writes it.
    static func fields<Settings>(_ settings: Settings, _ keys: ConfigKeys<Settings>) -> [String: String] {
        Dictionary(uniqueKeysWithValues: keys.keys.map { ($0.name, $0.fieldText(settings)) })
    }

    /// Key → its declared default, as TOML writes it ("nil" for a key unset by default).
    static func declaredDefaults<Settings>(_ keys: ConfigKeys<Settings>) -> [String: String] {
        Dictionary(uniqueKeysWithValues: keys.keys.map { ($0.name, tomlText($0.typedDefault) ?? "nil") })
    }

    /// The `[default]` policy of a config whose `[default]` writes every policy key that has a
    /// writable default, with that default.
    static func everyDefaultWritten() throws -> [String: String] {
        var text = "[default]\n"
        for key in ConfigSchema.policy.declarations {
            if case .value(let value) = key.defaultValue { text += "\(key.name) = \(value)\n" }
        }
        let config = try ConfigLoader.load(text: text, path: "defaults.toml", directory: "/", now: evaluationTime)
        return policyValues(config.policies.defaultEntry.policy.settings)
    }

    static func policyValues(_ settings: HostPolicy.Settings) -> [String: String] {
        [
            "action": settings.action.rawValue,
            "trust": settings.trust.name,
            "validate_host": "\(settings.validateHost)",
            "pin": settings.pinKind.rawValue,
            "pins": settings.pins.map(\.description).joined(separator: ","),
            "certificates": settings.pinnedCertificates.map(\.subject).joined(separator: ","),
            "enforce": "\(settings.enforce)",
            "expires": settings.expires ?? "nil",
            "include_subdomains": "\(settings.includeSubdomains)",
            "ports": settings.ports.sorted().map(String.init).joined(separator: ","),
            "min_tls": settings.minTLS.rawValue,
            "revocation": settings.revocation.name,
            "crls": { if case .crl(let lists) = settings.revocation { "\(lists.count) list(s)" } else { "" } }(),
            "require_web_pki_profile": "\(settings.requireWebPKIProfile)",
            "verify_command": settings.verifyCommand.map { $0.joined(separator: " ") } ?? "nil",
            "mode": settings.mode.rawValue,
            "client_certificate": "\(settings.clientIdentity != nil)",
        ]
    }
}
