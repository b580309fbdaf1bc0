import Foundation
import PinproxyCore
import XCTest
@testable import PinproxyInterop
import PinproxyPolicy
@testable import PinproxyService

extension ProxyMetrics {
    /// Metrics with a made-up build.
    static func forTests() -> ProxyMetrics { ProxyMetrics(version: "0.0.0-test", commit: "test") }
}

/// What an exporter is expected to carry beyond pinproxy's own counters: every family from the
/// first scrape, the process metrics, the reload gauges, expiry timestamps in seconds, and
/// per-entry series only where they are bounded.
final class ExporterMetricsTests: XCTestCase {
    func testEveryFamilyHasHelpAndTypeFromTheFirstScrape() throws {
        let text = ProxyMetrics.forTests().render()
        for family in ProxyMetrics.families {
            XCTAssertTrue(text.contains("\n# TYPE \(family.name) \(family.type)\n") || text.hasPrefix("# TYPE \(family.name) "),
                          "no TYPE line for \(family.name)")
            XCTAssertTrue(text.contains("# HELP \(family.name) "), "no HELP line for \(family.name)")
        }
        XCTAssertEqual(Set(try PrometheusParser.families(text)).count, ProxyMetrics.families.count,
                       "prometheus_client reads a family for each")
    }

    func testProcessMetricsDescribeThisProcess() throws {
        let before = Date().timeIntervalSince1970
        let samples = try PrometheusParser.parse(ProxyMetrics.forTests().render())
        let stats = try XCTUnwrap(ProcessStats.current())
        XCTAssertGreaterThan(try XCTUnwrap(samples.value("process_cpu_seconds_total")), 0)
        XCTAssertGreaterThan(try XCTUnwrap(samples.value("process_resident_memory_bytes")), 1_048_576)
        XCTAssertGreaterThanOrEqual(try XCTUnwrap(samples.value("process_virtual_memory_bytes")),
                                    try XCTUnwrap(samples.value("process_resident_memory_bytes")))
        let open = try XCTUnwrap(samples.value("process_open_fds"))
        XCTAssertGreaterThanOrEqual(open, 3, "stdin, stdout and stderr at least")
        XCTAssertGreaterThanOrEqual(try XCTUnwrap(samples.value("process_max_fds")), open)
        let started = try XCTUnwrap(samples.value("process_start_time_seconds"))
        XCTAssertLessThanOrEqual(started, before + 1)
        XCTAssertGreaterThan(started, before - 86_400, "this test process started today")
        XCTAssertEqual(started, stats.startTimeSeconds, accuracy: 0.01, "the start time does not move between reads")

        // A descriptor opened shows up in the next scrape.
        let pipe = Pipe()
        let later = try PrometheusParser.parse(ProxyMetrics.forTests().render())
        XCTAssertGreaterThanOrEqual(try XCTUnwrap(later.value("process_open_fds")), open + 2)
        try pipe.fileHandleForReading.close()
        try pipe.fileHandleForWriting.close()
    }

    /// The command name sits in parentheses and may hold spaces and `)`: fields count from the last one.
    func testStatFieldsCountFromTheLastParenthesis() throws {
        let line = "4242 (pin (x) ) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 123456 987654321 2048 "
            + "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
        let fields = try XCTUnwrap(ProcessStats.statFields(Array(line.utf8)))
        XCTAssertEqual(fields.utime, 250)
        XCTAssertEqual(fields.stime, 50)
        XCTAssertEqual(fields.startTicks, 123456)
        XCTAssertEqual(fields.vsize, 987654321)
        XCTAssertEqual(fields.rss, 2048)
        XCTAssertNil(ProcessStats.statFields(Array("4242 (cut".utf8)))
        XCTAssertEqual(ProcessStats.bootTime(Array("cpu  1 2 3\nbtime 1764000000\nprocesses 9\n".utf8)), 1_764_000_000)
    }

    func testReloadGaugesSayWhetherAndWhenTheLastLoadSucceeded() throws {
        let start = Date(timeIntervalSince1970: 1_790_000_000)
        let metrics = ProxyMetrics(version: "1", commit: "c", loadedAt: start)
        metrics.reload(ok: false, at: start.addingTimeInterval(60))
        var samples = try PrometheusParser.parse(metrics.render())
        XCTAssertEqual(samples.value("pinproxy_config_last_reload_successful"), 0)
        XCTAssertEqual(samples.value("pinproxy_config_last_reload_success_timestamp_seconds"), 1_790_000_000)
        metrics.reload(ok: true, at: start.addingTimeInterval(120))
        samples = try PrometheusParser.parse(metrics.render())
        XCTAssertEqual(samples.value("pinproxy_config_last_reload_successful"), 1)
        XCTAssertEqual(samples.value("pinproxy_config_last_reload_success_timestamp_seconds"), 1_790_000_120)
    }

    /// The earliest notAfter of the leaf and intermediates, for one-host entries only; a reload
    /// that removes the entry removes its series, and a late update for it does not bring it back.
    func testUpstreamCertificateExpiryOfOneHostEntries() throws {
        let chain = try CertificateChainFixture()
        let text = """
            [default]
            action = "verify"

            [hosts."api.example.com"]

            [hosts."sub.example.com"]
            include_subdomains = true

            [hosts."*.cdn.example.com"]

            [hosts."192.0.2.7"]
            """
        let config = try ConfigLoader.load(text: text, path: "/nonexistent/pinproxy.toml", directory: "/nonexistent")
        let metrics = ProxyMetrics.forTests()
        metrics.policyInForce(config.policies)
        for host in ["api.example.com", "sub.example.com", "x.cdn.example.com", "192.0.2.7", "other.example.org"] {
            metrics.upstreamChainVerified(chain.certificates, entry: config.policies.lookup(try XCTUnwrap(TargetHost(host))))
        }
        var samples = try PrometheusParser.parse(metrics.render())
        let series = samples.filter { $0.name == "pinproxy_upstream_certificate_expiry_timestamp_seconds" }
        XCTAssertEqual(Set(series.compactMap { $0.labels["host_pattern"] }), ["api.example.com", "192.0.2.7"])
        // The intermediate runs out first; the root, earlier still, is not the server's.
        XCTAssertEqual(chain.certificates[1].notAfter, chain.certificates.dropLast().map(\.notAfter).min())
        XCTAssertLessThan(chain.certificates[2].notAfter, chain.certificates[1].notAfter)
        XCTAssertEqual(series.first?.value, chain.certificates[1].notAfter.timeIntervalSince1970)

        let reloaded = try ConfigLoader.load(text: text.replacingOccurrences(of: "[hosts.\"api.example.com\"]", with: ""),
                                             path: "/nonexistent/pinproxy.toml", directory: "/nonexistent")
        metrics.policyInForce(reloaded.policies)
        // A connection that took the old snapshot finishes after the reload.
        metrics.upstreamChainVerified(chain.certificates, entry: config.policies.lookup(try XCTUnwrap(TargetHost("api.example.com"))))
        samples = try PrometheusParser.parse(metrics.render())
        XCTAssertEqual(Set(samples.filter { $0.name == "pinproxy_upstream_certificate_expiry_timestamp_seconds" }
                            .compactMap { $0.labels["host_pattern"] }), ["192.0.2.7"])
    }

    /// 100,000 entries without pins add no series: per-entry series exist only for entries with
    /// pins or one exact host whose chain was verified.
    func testPerEntrySeriesStayBoundedOnALargePolicy() throws {
        let chain = try CertificateChainFixture()
        var text = "[default]\naction = \"verify\"\n"
        for index in 0..<100_000 { text += "\n[hosts.\"*.h\(index).example.com\"]\n" }
        text += "\n[hosts.\"api.example.com\"]\n"
        let config = try ConfigLoader.load(text: text, path: "/nonexistent/pinproxy.toml", directory: "/nonexistent")
        let metrics = ProxyMetrics.forTests()
        let fresh = try PrometheusParser.parse(metrics.render()).count
        metrics.policyInForce(config.policies)
        for index in stride(from: 0, to: 100_000, by: 1_000) {
            let entry = config.policies.lookup(try XCTUnwrap(TargetHost("www.h\(index).example.com")))
            metrics.upstreamChainVerified(chain.certificates, entry: entry)
            metrics.refusal(hostPattern: ProxyMetrics.patternLabel(for: entry), reason: .pinMismatch)
        }
        metrics.upstreamChainVerified(chain.certificates, entry: config.policies.lookup(try XCTUnwrap(TargetHost("api.example.com"))))
        let samples = try PrometheusParser.parse(metrics.render())
        // The 100 entries that refused have a counter each; the one exact host its expiry.
        XCTAssertEqual(samples.count, fresh + 100 + 1)
    }
}

/// A root (valid 2 days), an intermediate (5 days) and a leaf (30 days) made with the openssl CLI.
struct CertificateChainFixture {
    /// Leaf first.
    let certificates: [Certificate]

    init() throws {
        let directory = try TemporaryDirectory()
        let openssl = try XCTUnwrap(findExecutable("openssl"), "openssl CLI needed to make test certificates")
        func run(_ arguments: [String]) throws {
            let made = try runProcess(openssl, arguments)
            XCTAssertEqual(made.status, 0, made.stderr)
        }
        let d = directory.path
        try "basicConstraints=critical,CA:TRUE\n".write(toFile: d + "/ca.ext", atomically: true, encoding: .utf8)
        try run(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", d + "/root.key",
                 "-out", d + "/root.pem", "-days", "2", "-subj", "/CN=Test Root"])
        for (name, issuer, days, ext) in [("int", "root", "5", "ca.ext"), ("leaf", "int", "30", nil)] {
            try run(["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "\(d)/\(name).key",
                     "-out", "\(d)/\(name).csr", "-subj", "/CN=\(name)"])
            try run(["x509", "-req", "-in", "\(d)/\(name).csr", "-CA", "\(d)/\(issuer).pem", "-CAkey", "\(d)/\(issuer).key",
                     "-CAcreateserial", "-days", days, "-out", "\(d)/\(name).pem"] + (ext.map { ["-extfile", "\(d)/\($0)"] } ?? []))
        }
        certificates = try ["leaf", "int", "root"].map { name in
            try XCTUnwrap(Certificate.parseAll(Array(try Data(contentsOf: URL(fileURLWithPath: "\(d)/\(name).pem")))).first)
        }
    }
}
