import Foundation
import XCTest
import PinproxyInterop
import PinproxyPolicy
import PinproxyService

final class ProxyMetricsTests: XCTestCase {
    func testFreshMetricsParseAndReadZero() throws {
        let loadedAt = Date(timeIntervalSince1970: 1_790_000_000.5)
        let text = ProxyMetrics(version: "1.2.3", commit: "abc1234", loadedAt: loadedAt).render()
        let samples = try PrometheusParser.parse(text)
        XCTAssertEqual(samples.value("pinproxy_build_info", ["version": "1.2.3", "commit": "abc1234"]), 1)
        XCTAssertEqual(samples.value("pinproxy_config_last_reload_successful"), 1)
        XCTAssertEqual(samples.value("pinproxy_config_last_reload_success_timestamp_seconds"), 1_790_000_000.5)
        XCTAssertEqual(samples.value("pinproxy_config_reloads_total", ["result": "ok"]), 0)
        XCTAssertEqual(samples.value("pinproxy_config_reloads_total", ["result": "failed"]), 0)
        XCTAssertEqual(samples.value("pinproxy_connections_total", ["outcome": "allowed", "reason": "none", "listener": "connect", "client": "none"]), 0)
        XCTAssertEqual(samples.value("pinproxy_open_tunnels"), 0)
        XCTAssertEqual(samples.value("pinproxy_relayed_bytes_total", ["direction": "client_to_upstream"]), 0)
        XCTAssertEqual(samples.value("pinproxy_relayed_bytes_total", ["direction": "upstream_to_client"]), 0)
        XCTAssertEqual(samples.value("pinproxy_upstream_handshake_seconds_count"), 0)
        XCTAssertEqual(samples.value("pinproxy_verification_seconds_count"), 0)
        XCTAssertEqual(samples.value("pinproxy_reopen_verdict_changes_total"), 0)
    }

    func testTransparentConnectionsAreCountedUnderTheirOwnListenerLabel() throws {
        let metrics = ProxyMetrics.forTests()
        metrics.connection(outcome: .allowed, reason: nil, listener: .transparent)
        metrics.connection(outcome: .refused, reason: .noSNI, listener: .transparent)
        metrics.connection(outcome: .allowed, reason: nil, listener: .connect)
        let samples = try PrometheusParser.parse(metrics.render())
        XCTAssertEqual(samples.value("pinproxy_connections_total", ["outcome": "allowed", "reason": "none", "listener": "transparent", "client": "none"]), 1)
        XCTAssertEqual(samples.value("pinproxy_connections_total", ["outcome": "allowed", "reason": "none", "listener": "connect", "client": "none"]), 1)
        XCTAssertEqual(samples.value("pinproxy_connections_total", ["outcome": "refused", "reason": "no-sni", "listener": "transparent", "client": "none"]), 1)
    }

    func testEverySeriesParsesWithItsTypeHelpAndValue() throws {
        let metrics = ProxyMetrics.forTests()
        metrics.connection(outcome: .allowed, reason: nil)
        metrics.connection(outcome: .allowed, reason: nil)
        metrics.connection(outcome: .refused, reason: .pinMismatch)
        metrics.connection(outcome: .reportOnly, reason: .hostnameMismatch)
        metrics.connection(outcome: .clientGone, reason: nil)
        metrics.refusal(hostPattern: "api.example.com", reason: .pinMismatch)
        metrics.refusal(hostPattern: "api.example.com", reason: .pinMismatch)
        metrics.refusal(hostPattern: "*.cdn.example.com", reason: .hostnameMismatch, reportOnly: true)
        metrics.refusal(hostPattern: #"odd "quoted" \ pattern"#, reason: .hostDenied)
        metrics.tunnelOpened()
        metrics.tunnelOpened()
        metrics.tunnelOpened()
        metrics.relayed(bytesUp: 100, bytesDown: 0)
        metrics.relayed(bytesUp: 1_000, bytesDown: 20_000)
        metrics.tunnelClosed()
        metrics.handshakeLatency(0.04)
        metrics.handshakeLatency(0.3)
        metrics.verificationLatency(0.0007)
        metrics.reload(ok: true)
        metrics.reload(ok: true)
        metrics.reload(ok: false)
        metrics.reopenVerdictChanged()
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        metrics.setPinExpiry(entries: [(pattern: "api.example.com", expiresAt: now.addingTimeInterval(41.5 * 86_400)),
                                       (pattern: "old.example.com", expiresAt: now.addingTimeInterval(-2 * 86_400))], now: now)

        let samples = try PrometheusParser.parse(metrics.render())

        XCTAssertEqual(samples.value("pinproxy_connections_total", ["outcome": "allowed", "reason": "none", "listener": "connect", "client": "none"]), 2)
        XCTAssertEqual(samples.value("pinproxy_connections_total", ["outcome": "refused", "reason": "pin-mismatch", "listener": "connect", "client": "none"]), 1)
        XCTAssertEqual(samples.value("pinproxy_connections_total",
                                     ["outcome": "report-only", "reason": "hostname-mismatch", "listener": "connect", "client": "none"]), 1)
        XCTAssertEqual(samples.value("pinproxy_connections_total", ["outcome": "client-gone", "reason": "none", "listener": "connect", "client": "none"]), 1)
        XCTAssertEqual(samples.value("pinproxy_refusals_total",
                                     ["host_pattern": "api.example.com", "reason": "pin-mismatch", "mode": "enforce", "client": "none"]), 2)
        XCTAssertEqual(samples.value("pinproxy_refusals_total",
                                     ["host_pattern": "*.cdn.example.com", "reason": "hostname-mismatch",
                                      "mode": "report-only", "client": "none"]), 1)
        XCTAssertEqual(samples.value("pinproxy_refusals_total",
                                     ["host_pattern": #"odd "quoted" \ pattern"#, "reason": "host-denied", "mode": "enforce", "client": "none"]), 1,
                       "label escaping did not round-trip")
        XCTAssertEqual(samples.value("pinproxy_open_tunnels"), 2)
        XCTAssertEqual(samples.value("pinproxy_relayed_bytes_total", ["direction": "client_to_upstream"]), 1_100)
        XCTAssertEqual(samples.value("pinproxy_relayed_bytes_total", ["direction": "upstream_to_client"]), 20_000)
        XCTAssertEqual(samples.value("pinproxy_upstream_handshake_seconds_count"), 2)
        XCTAssertEqual(try XCTUnwrap(samples.value("pinproxy_upstream_handshake_seconds_sum")), 0.34, accuracy: 1e-9)
        XCTAssertEqual(samples.value("pinproxy_upstream_handshake_seconds_bucket", ["le": "0.05"]), 1)
        XCTAssertEqual(samples.value("pinproxy_upstream_handshake_seconds_bucket", ["le": "0.5"]), 2)
        XCTAssertEqual(samples.value("pinproxy_upstream_handshake_seconds_bucket", ["le": "+Inf"]), 2)
        XCTAssertEqual(samples.value("pinproxy_verification_seconds_bucket", ["le": "0.0005"]), 0)
        XCTAssertEqual(samples.value("pinproxy_verification_seconds_bucket", ["le": "0.001"]), 1)
        XCTAssertEqual(samples.value("pinproxy_config_reloads_total", ["result": "ok"]), 2)
        XCTAssertEqual(samples.value("pinproxy_config_reloads_total", ["result": "failed"]), 1)
        XCTAssertEqual(samples.value("pinproxy_reopen_verdict_changes_total"), 1)
        XCTAssertEqual(samples.value("pinproxy_pin_expiry_days", ["host_pattern": "api.example.com"]), 41.5)
        XCTAssertEqual(samples.value("pinproxy_pin_expiry_days", ["host_pattern": "old.example.com"]), -2)
        XCTAssertEqual(samples.value("pinproxy_pin_expiry_timestamp_seconds", ["host_pattern": "api.example.com"]), 1_803_585_600)
        XCTAssertEqual(samples.value("pinproxy_pin_expiry_timestamp_seconds", ["host_pattern": "old.example.com"]), 1_799_827_200)

        let types = Dictionary(samples.map { ($0.family, $0.type) }, uniquingKeysWith: { first, _ in first })
        XCTAssertEqual(types["pinproxy_connections"], "counter")
        XCTAssertEqual(types["pinproxy_refusals"], "counter")
        XCTAssertEqual(types["pinproxy_relayed_bytes"], "counter")
        XCTAssertEqual(types["pinproxy_config_reloads"], "counter")
        XCTAssertEqual(types["pinproxy_reopen_verdict_changes"], "counter")
        XCTAssertEqual(types["pinproxy_open_tunnels"], "gauge")
        XCTAssertEqual(types["pinproxy_pin_expiry_days"], "gauge")
        XCTAssertEqual(types["pinproxy_pin_expiry_timestamp_seconds"], "gauge")
        XCTAssertEqual(types["pinproxy_build_info"], "gauge")
        XCTAssertEqual(types["process_cpu_seconds"], "counter")
        XCTAssertEqual(types["process_open_fds"], "gauge")
        XCTAssertEqual(types["pinproxy_upstream_handshake_seconds"], "histogram")
        XCTAssertEqual(types["pinproxy_verification_seconds"], "histogram")
        XCTAssertTrue(samples.allSatisfy { !$0.help.isEmpty }, "a family without HELP")
    }

    func testSetPinExpiryReplacesTheSeries() throws {
        let metrics = ProxyMetrics.forTests()
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        func days(_ count: Double) -> Date { now.addingTimeInterval(count * 86_400) }
        metrics.setPinExpiry(entries: [(pattern: "a.test", expiresAt: days(10)), (pattern: "b.test", expiresAt: days(20))], now: now)
        metrics.setPinExpiry(entries: [(pattern: "b.test", expiresAt: days(19))], now: now)
        var samples = try PrometheusParser.parse(metrics.render())
        XCTAssertNil(samples.value("pinproxy_pin_expiry_days", ["host_pattern": "a.test"]))
        XCTAssertNil(samples.value("pinproxy_pin_expiry_timestamp_seconds", ["host_pattern": "a.test"]))
        XCTAssertEqual(samples.value("pinproxy_pin_expiry_days", ["host_pattern": "b.test"]), 19)
        XCTAssertEqual(samples.value("pinproxy_pin_expiry_timestamp_seconds", ["host_pattern": "b.test"]), days(19).timeIntervalSince1970)

        metrics.setPinExpiry(entries: [], now: now)
        let text = metrics.render()
        samples = try PrometheusParser.parse(text)
        XCTAssertFalse(samples.contains { $0.name.hasPrefix("pinproxy_pin_expiry") })
        XCTAssertTrue(text.contains("# TYPE pinproxy_pin_expiry_timestamp_seconds gauge\n"), "the family went with its last series")
        metrics.setPinExpiry(entries: [(pattern: "a.test", expiresAt: days(3))], now: now)
        samples = try PrometheusParser.parse(metrics.render())
        XCTAssertEqual(samples.value("pinproxy_pin_expiry_days", ["host_pattern": "a.test"]), 3)
    }

    /// Event loops on several threads call one `ProxyMetrics`: no update may be lost.
    func testConcurrentUpdatesAreAllCounted() throws {
        let metrics = ProxyMetrics.forTests()
        let threads = 8, iterations = 2_000
        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            for i in 0..<iterations {
                metrics.connection(outcome: .refused, reason: .pinMismatch)
                metrics.refusal(hostPattern: "p\(thread % 2).test", reason: .pinMismatch)
                metrics.tunnelOpened()
                metrics.relayed(bytesUp: 1, bytesDown: 2)
                metrics.tunnelClosed()
                metrics.handshakeLatency(0.01)
                if i % 500 == 0 { metrics.setPinExpiry(entries: [(pattern: "x.test", expiresAt: Date())]) }
            }
        }
        let total = Double(threads * iterations)
        let samples = try PrometheusParser.parse(metrics.render())
        XCTAssertEqual(samples.value("pinproxy_connections_total", ["outcome": "refused", "reason": "pin-mismatch", "listener": "connect", "client": "none"]), total)
        XCTAssertEqual(samples.value("pinproxy_refusals_total",
                                     ["host_pattern": "p0.test", "reason": "pin-mismatch", "mode": "enforce", "client": "none"]), total / 2)
        XCTAssertEqual(samples.value("pinproxy_open_tunnels"), 0)
        XCTAssertEqual(samples.value("pinproxy_relayed_bytes_total", ["direction": "client_to_upstream"]), total)
        XCTAssertEqual(samples.value("pinproxy_relayed_bytes_total", ["direction": "upstream_to_client"]), 2 * total)
        XCTAssertEqual(samples.value("pinproxy_upstream_handshake_seconds_count"), total)
    }

    /// Days until the earliest pinned certificate or `expires`, from a real loaded config.
    func testPinExpiryEntriesFromAConfig() throws {
        let directory = try TemporaryDirectory()
        let openssl = try XCTUnwrap(findExecutable("openssl"), "openssl CLI needed to make a test certificate")
        let made = try runProcess(openssl, [
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", directory.path + "/leaf.key", "-out", directory.path + "/leaf.pem",
            "-days", "10", "-subj", "/CN=internal.example.test",
            "-addext", "subjectAltName=DNS:internal.example.test",
        ])
        XCTAssertEqual(made.status, 0, made.stderr)
        let certificate = try XCTUnwrap(Certificate.parseAll(Array(try Data(contentsOf: URL(fileURLWithPath: directory.path + "/leaf.pem")))).first)
        let pinA = Pin(digest: [UInt8](repeating: 1, count: 32)).description
        let pinB = Pin(digest: [UInt8](repeating: 2, count: 32)).description
        let text = """
            [default]
            action = "verify"

            [hosts."api.example.com"]
            pin = "public-key"
            pins = ["\(pinA)", "\(pinB)"]
            expires = 2031-01-01

            [hosts."internal.example.test"]
            trust = "pinned"
            pin = "certificate"
            certificates = ["leaf.pem"]

            [hosts."*.cdn.example.com"]
            pin = "public-key"
            pins = ["\(pinA)", "\(pinB)"]

            [hosts."tracker.example.com"]
            action = "deny"
            """
        let now = Date()
        let config = try ConfigLoader.load(text: text, path: directory.path + "/pinproxy.toml",
                                           directory: directory.path, now: now)
        let entries = ProxyMetrics.pinExpiryEntries(in: config.policies)
        let byPattern = Dictionary(uniqueKeysWithValues: entries.map { ($0.pattern, $0.expiresAt.timeIntervalSince(now) / 86_400) })

        // Digests only, no expires: nothing runs out. Deny and [default]: nothing pinned.
        XCTAssertEqual(Set(byPattern.keys), ["api.example.com", "internal.example.test"])
        let expiresAt = ISO8601DateFormatter().date(from: "2031-01-02T00:00:00Z")!
        XCTAssertEqual(try XCTUnwrap(byPattern["api.example.com"]), expiresAt.timeIntervalSince(now) / 86_400, accuracy: 1e-6)
        XCTAssertEqual(try XCTUnwrap(byPattern["internal.example.test"]),
                       certificate.notAfter.timeIntervalSince(now) / 86_400, accuracy: 1e-6)
        XCTAssertEqual(try XCTUnwrap(byPattern["internal.example.test"]), 10, accuracy: 0.01)

        let metrics = ProxyMetrics.forTests()
        metrics.policyInForce(config.policies, now: now)
        let samples = try PrometheusParser.parse(metrics.render())
        XCTAssertEqual(try XCTUnwrap(samples.value("pinproxy_pin_expiry_days", ["host_pattern": "internal.example.test"])),
                       10, accuracy: 0.01)
        XCTAssertEqual(samples.value("pinproxy_pin_expiry_timestamp_seconds", ["host_pattern": "internal.example.test"]),
                       certificate.notAfter.timeIntervalSince1970)
        XCTAssertEqual(samples.value("pinproxy_pin_expiry_timestamp_seconds", ["host_pattern": "api.example.com"]),
                       expiresAt.timeIntervalSince1970)
    }

    func testTheDefaultEntryAndAHostNamedDefaultHaveTheirOwnSeries() throws {
        let pinA = Pin(digest: [UInt8](repeating: 1, count: 32)).description
        let pinB = Pin(digest: [UInt8](repeating: 2, count: 32)).description
        let text = """
            [default]
            pin = "public-key"
            pins = ["\(pinA)", "\(pinB)"]
            expires = 2031-01-01

            [hosts."default"]
            pin = "public-key"
            pins = ["\(pinA)", "\(pinB)"]
            expires = 2032-01-01
            """
        let now = Date()
        let config = try ConfigLoader.load(text: text, path: "/nonexistent/pinproxy.toml", directory: "/nonexistent", now: now)
        let entries = ProxyMetrics.pinExpiryEntries(in: config.policies)
        XCTAssertEqual(entries.map(\.pattern).sorted(), ["[default]", "default"])
        XCTAssertEqual(ProxyMetrics.patternLabel(for: config.policies.defaultEntry), "[default]")
        XCTAssertEqual(config.policies.entries.map(ProxyMetrics.patternLabel(for:)), ["default"])

        let metrics = ProxyMetrics.forTests()
        metrics.setPinExpiry(entries: entries, now: now)
        metrics.refusal(hostPattern: ProxyMetrics.patternLabel(for: config.policies.defaultEntry), reason: .pinMismatch)
        let samples = try PrometheusParser.parse(metrics.render())
        let days2031 = ISO8601DateFormatter().date(from: "2031-01-02T00:00:00Z")!.timeIntervalSince(now) / 86_400
        let days2032 = ISO8601DateFormatter().date(from: "2032-01-02T00:00:00Z")!.timeIntervalSince(now) / 86_400
        XCTAssertEqual(try XCTUnwrap(samples.value("pinproxy_pin_expiry_days", ["host_pattern": "[default]"])), days2031, accuracy: 1e-3)
        XCTAssertEqual(try XCTUnwrap(samples.value("pinproxy_pin_expiry_days", ["host_pattern": "default"])), days2032, accuracy: 1e-3)
        XCTAssertEqual(samples.value("pinproxy_refusals_total", ["host_pattern": "[default]", "reason": "pin-mismatch", "mode": "enforce", "client": "none"]), 1)
    }

    /// The `client` label: the matching `[clients]` sections (as `ClientDecision.metricLabel`
    /// joins them), `none` otherwise; and the lookups of local clients' sockets.
    func testClientLabelsAndLookups() throws {
        let metrics = ProxyMetrics(version: "1.2.3", commit: "abc1234")
        metrics.connection(outcome: .allowed, reason: nil, client: "user:alice,exe:/usr/bin/git")
        metrics.connection(outcome: .allowed, reason: nil)
        metrics.connection(outcome: .refused, reason: .clientDenied, client: "user:www-data")
        metrics.refusal(hostPattern: "[default]", reason: .clientDenied, client: "user:www-data")
        metrics.refusal(hostPattern: "[default]", reason: .clientDenied, reportOnly: true, client: "exe:/usr/bin/git")
        metrics.clientLookup(found: true)
        metrics.clientLookup(found: true)
        metrics.clientLookup(found: false)
        let samples = try PrometheusParser.parse(metrics.render())
        let connections = "pinproxy_connections_total", refusals = "pinproxy_refusals_total"
        XCTAssertEqual(samples.value(connections, ["outcome": "allowed", "reason": "none", "listener": "connect", "client": "user:alice,exe:/usr/bin/git"]), 1)
        XCTAssertEqual(samples.value(connections, ["outcome": "allowed", "reason": "none", "listener": "connect", "client": "none"]), 1)
        XCTAssertEqual(samples.value(connections, ["outcome": "refused", "reason": "client-denied", "listener": "connect", "client": "user:www-data"]), 1)
        XCTAssertEqual(samples.value(refusals, ["host_pattern": "[default]", "reason": "client-denied", "mode": "enforce", "client": "user:www-data"]), 1)
        XCTAssertEqual(samples.value(refusals, ["host_pattern": "[default]", "reason": "client-denied", "mode": "report-only", "client": "exe:/usr/bin/git"]), 1)
        XCTAssertEqual(samples.value("pinproxy_client_lookups_total", ["result": "found"]), 2)
        XCTAssertEqual(samples.value("pinproxy_client_lookups_total", ["result": "unknown"]), 1)
    }
}
