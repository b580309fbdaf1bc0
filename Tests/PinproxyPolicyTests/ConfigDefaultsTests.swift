import Foundation
import PinproxyInterop
@testable import PinproxyPolicy
import XCTest

/// Today's default of every config key, frozen: an empty config and the embedded default
/// (config/pinproxy.toml) must give exactly these `[proxy]`, `[capture]` and `[default]`
/// values. A change of a default is a change of behaviour: it changes this table on purpose.
/// (`mode` has one accepted value, "intercept", and is not kept in the settings.)
final class ConfigDefaultsTests: XCTestCase {
    /// `[proxy]`, key → value as `proxyValues` writes it.
    static let proxyDefaults: [String: String] = [
        "listen": "127.0.0.1:3128",
        "transparent_listen": "",
        "ca_dir": "nil",
        "allow_ports": "443",
        "block_private_destinations": "true",
        "metrics_listen": "nil",
        "log_format": "logfmt",
        "refusal": "connect",
        "pid_file": "nil",
        "report_to": "",
        "report_rate_limit": "600",
        "report_file_max_bytes": "67108864",
        "verify_command_timeout": "5.0",
        "verify_command_cache": "300.0",
        "verify_command_concurrency": "4",
        "workers": "nil",
        "request_timeout": "10.0",
        "dns_timeout": "10.0",
        "connect_timeout": "10.0",
        "handshake_timeout": "10.0",
        "idle_timeout": "300.0",
        "drain_timeout": "30.0",
        "admin_timeout": "10.0",
        "max_connections": "nil",
        "relay_buffer_bytes": "262144",
    ]

    /// `[capture]`, key → value as `captureValues` writes it.
    static let captureDefaults: [String: String] = [
        "ports": "443",
        "local": "false",
        "block_quic": "true",
        "exempt_users": "pinproxy",
    ]

    /// `[default]`, key → value as `policyValues` writes it.
    static let entryDefaults: [String: String] = [
        "action": "verify",
        "trust": "system",
        "validate_host": "true",
        "pin": "none",
        "pins": "",
        "certificates": "",
        "enforce": "true",
        "expires": "nil",
        "include_subdomains": "false",
        "ports": "443",
        "min_tls": "1.2",
        "revocation": "off",
        "crls": "",
        "require_web_pki_profile": "true",
        "verify_command": "nil",
    ]

    func testAnEmptyConfigHasTodaysDefaults() throws {
        let config = try ConfigLoader.load(text: "", path: "empty.toml", directory: "/", now: evaluationTime)
        XCTAssertEqual(Self.proxyValues(config.proxy), Self.proxyDefaults)
        XCTAssertEqual(Self.captureValues(config.capture), Self.captureDefaults)
        XCTAssertFalse(config.capture.isWritten)
        XCTAssertEqual(Self.policyValues(config.policies.defaultEntry.policy.settings), Self.entryDefaults)
        XCTAssertEqual(config.policies.entries.count, 0)
        XCTAssertTrue(config.resolve.isEmpty)
        XCTAssertTrue(config.warnings.isEmpty, "\(config.warnings)")
    }

    func testTheEmbeddedDefaultHasTodaysDefaults() throws {
        let config = try ConfigLoader.loadEmbedded(now: evaluationTime)
        XCTAssertEqual(Self.proxyValues(config.proxy), Self.proxyDefaults)
        XCTAssertEqual(Self.captureValues(config.capture), Self.captureDefaults)
        XCTAssertFalse(config.capture.isWritten)
        XCTAssertEqual(Self.policyValues(config.policies.defaultEntry.policy.settings), Self.entryDefaults)
        XCTAssertEqual(config.policies.entries.count, 0)
        XCTAssertTrue(config.resolve.isEmpty)
    }

    /// A host entry that sets nothing inherits `[default]`'s values.
    func testAHostEntryThatSetsNothingHasTheDefaults() throws {
        let config = try ConfigLoader.load(text: "[hosts.\"api.test\"]\n", path: "host.toml", directory: "/", now: evaluationTime)
        let entry = config.policies.lookup(.name("api.test"))
        XCTAssertEqual(entry.name, "hosts.\"api.test\"")
        XCTAssertEqual(Self.policyValues(entry.policy.settings), Self.entryDefaults)
    }

    static func proxyValues(_ proxy: ProxySettings) -> [String: String] {
        func text<T>(_ value: T?) -> String { value.map { "\($0)" } ?? "nil" }
        return [
            "listen": proxy.listen.map(\.description).joined(separator: ","),
            "transparent_listen": proxy.transparentListen.map(\.description).joined(separator: ","),
            "ca_dir": text(proxy.caDirectory),
            "allow_ports": proxy.allowPorts.sorted().map(String.init).joined(separator: ","),
            "block_private_destinations": "\(proxy.blockPrivateDestinations)",
            "metrics_listen": text(proxy.metricsListen),
            "log_format": proxy.logFormat.rawValue,
            "refusal": proxy.refusal.rawValue,
            "pid_file": text(proxy.pidFile),
            "report_to": proxy.reportTo.map { "\($0)" }.joined(separator: ","),
            "report_rate_limit": "\(proxy.reportRateLimit)",
            "report_file_max_bytes": "\(proxy.reportFileMaxBytes)",
            "verify_command_timeout": "\(proxy.verifyCommandTimeout)",
            "verify_command_cache": "\(proxy.verifyCommandCache)",
            "verify_command_concurrency": "\(proxy.verifyCommandConcurrency)",
            "workers": text(proxy.workers),
            "request_timeout": "\(proxy.requestTimeout)",
            "dns_timeout": "\(proxy.dnsTimeout)",
            "connect_timeout": "\(proxy.connectTimeout)",
            "handshake_timeout": "\(proxy.handshakeTimeout)",
            "idle_timeout": "\(proxy.idleTimeout)",
            "drain_timeout": "\(proxy.drainTimeout)",
            "admin_timeout": "\(proxy.adminTimeout)",
            "max_connections": text(proxy.maxConnections),
            "relay_buffer_bytes": "\(proxy.relayBufferBytes)",
        ]
    }

    static func captureValues(_ capture: CaptureSettings) -> [String: String] {
        [
            "ports": capture.ports.map(String.init).joined(separator: ","),
            "local": "\(capture.local)",
            "block_quic": "\(capture.blockQUIC)",
            "exempt_users": capture.exemptUsers.joined(separator: ","),
        ]
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
        ]
    }
}
