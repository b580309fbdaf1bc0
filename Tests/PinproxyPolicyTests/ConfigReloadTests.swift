@testable import PinproxyPolicy
import XCTest

/// Which keys a reload applies is declared with each key (`restartOnly`, `appliedByEgress`);
/// the daemon's reload warning names the restart-only keys that changed, compared as declared.
final class ConfigReloadTests: XCTestCase {
    /// The [proxy] keys the daemon reads only at its start, and where.
    static let readAtStart: [String: String] = [
        "listen": "the workers' listeners, bound in Daemon.init",
        "transparent_listen": "the workers' listeners and SharedState.transparentListeners",
        "ca_dir": "LocalCA.openOrCreate in Daemon.init",
        "workers": "the worker count in Daemon.init",
        "log_format": "the AccessLog made in Daemon.init",
        "metrics_listen": "the AdminHTTPServer made in Daemon.init",
        "drain_timeout": "Daemon.settings, the start's, read by drain()",
        "admin_timeout": "the AdminHTTPServer's requestTimeout, set in Daemon.init",
        "pid_file": "written by `pinproxy run` before the daemon starts",
        "report_to": "SharedState.reports, made at the start",
        "verify_command_concurrency": "SharedState.customChecks, made at the start",
    ]

    /// A value other than the default for the [proxy] keys whose declaration gives none
    /// (`otherValue`): lists, paths and addresses.
    static let changed: [String: String] = [
        "listen": #"["127.0.0.1:3999"]"#, "transparent_listen": #"["127.0.0.1:3129"]"#, "ca_dir": #""/tmp/ca""#,
        "allow_ports": "[443, 8443]", "metrics_listen": #""127.0.0.1:9128""#, "pid_file": #""/tmp/p.pid""#,
        "report_to": #"["file:/tmp/reports.jsonl"]"#,
    ]

    /// A value other than `key`'s default, from its declaration: its example (an optional key),
    /// the other boolean, another number in its range or of seconds, another of its words; else
    /// the `changed` table's. A new key of those kinds needs no entry here.
    static func otherValue(_ key: ConfigKeyDeclaration) -> String? {
        if let listed = changed[key.name] { return listed }
        guard case .value(let text) = key.defaultValue else { return key.example }
        switch key.value {
        case .bool: return text == "true" ? "false" : "true"
        case .integer(let range): return String(Int(text) == range.lowerBound ? range.lowerBound + 1 : range.lowerBound)
        case .seconds: return Double(text).map { String(Int($0) + 1) }
        case .choice(let words): return words.first { "\"\($0)\"" != text }.map { "\"\($0)\"" }
        case .string, .nonEmptyString, .date, .ports, .strings, .wordOrStrings: return key.example
        }
    }

    static func proxy(_ line: String = "") throws -> ProxySettings {
        try ConfigLoader.load(text: "[proxy]\n\(line)\n", path: "c.toml", directory: "/", now: evaluationTime).proxy
    }

    func testTheRestartOnlyKeysAreThoseTheDaemonReadsAtStart() {
        let declared = ConfigSchema.proxy.declarations.filter { $0.effect == .restart }.map(\.name)
        XCTAssertEqual(Set(declared), Set(Self.readAtStart.keys))
        // The warning names them in the order it always has (the declarations' order).
        XCTAssertEqual(declared, ["listen", "transparent_listen", "ca_dir", "workers", "log_format", "metrics_listen",
                                  "drain_timeout", "admin_timeout", "pid_file", "report_to", "verify_command_concurrency"])
        // The daemon reads no other table at its start: [capture] is the egress lock's.
        XCTAssertTrue(ConfigSchema.capture.declarations.allSatisfy { $0.effect == .egressApply })
        XCTAssertTrue((ConfigSchema.policy.declarations + ConfigSchema.clients.declarations).allSatisfy { $0.effect == .reload })
    }

    /// Each key changed alone: a restart-only key is named, by its own comparison; any other is not.
    func testEachChangeIsNamedOnlyWhenItIsRestartOnly() throws {
        let running = try Self.proxy()
        for key in ConfigSchema.proxy.declarations {
            guard let value = Self.otherValue(key) else {
                XCTFail("\(key.name): no other value; add one to `changed`")
                continue
            }
            let loaded = try Self.proxy("\(key.name) = \(value)")
            XCTAssertEqual(running.restartOnlyChanges(to: loaded), key.effect == .restart ? [key.name] : [], key.name)
        }
        XCTAssertEqual(running.restartOnlyChanges(to: running), [])
    }

    /// Several changed at once are named in declaration order, whatever the file's order.
    func testSeveralChangesAreNamedInDeclarationOrder() throws {
        let loaded = try Self.proxy("verify_command_concurrency = 2\nmetrics_listen = \"127.0.0.1:9128\"\nworkers = 3\nlisten = [\"127.0.0.1:3999\"]")
        XCTAssertEqual(try Self.proxy().restartOnlyChanges(to: loaded), ["listen", "workers", "metrics_listen", "verify_command_concurrency"])
    }
}
