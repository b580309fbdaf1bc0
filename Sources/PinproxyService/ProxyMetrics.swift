import Foundation
import PinproxyInterop
import PinproxyPolicy
import Prometheus

/// The daemon's Prometheus metrics, exposed on `/metrics` when `metrics_listen` is set.
///
/// Owns a `PrometheusCollectorRegistry` (swift-prometheus), which renders the text exposition
/// format. Series:
///
/// | name | type | labels |
/// | --- | --- | --- |
/// | `pinproxy_connections_total` | counter | `outcome` (allowed, refused, would_refuse, client_gone), `reason` (a refusal token, or `none`), `listener` (connect, transparent), `client` |
/// | `pinproxy_refusals_total` | counter | `host_pattern`, `reason`, `mode` (enforce, report_only), `client` |
/// | `pinproxy_client_lookups_total` | counter | `result` (found, unknown): sockets of local clients looked up |
/// | `pinproxy_reopen_verdict_changes_total` | counter | |
/// | `pinproxy_open_tunnels` | gauge | |
/// | `pinproxy_relayed_bytes_total` | counter | `direction` (client_to_upstream, upstream_to_client) |
/// | `pinproxy_upstream_handshake_seconds` | histogram | |
/// | `pinproxy_verification_seconds` | histogram | |
/// | `pinproxy_config_reloads_total` | counter | `result` (ok, failed) |
/// | `pinproxy_pin_expiry_days` | gauge | `host_pattern`: days until the entry's earliest pinned certificate or `expires` runs out (negative once past) |
///
/// Labels are bounded: `host_pattern` is always a configured pattern (`[default]` for the
/// `[default]` entry, which no pattern can spell, `-` before any entry applies), never a
/// requested host name; `client` is the `[clients]` sections that matched the connection's
/// client, joined in config order (`ClientDecision.metricLabel`), or `none`: never a path or pid
/// the config does not name.
///
/// Thread safety: every method may be called from any thread at any time, concurrently — the
/// daemon's event loops each call it. swift-prometheus's registry, `Counter`, `Gauge` and
/// `Histogram` are `Sendable` and lock or use atomics internally; the one piece of state this
/// class adds (the pin-expiry gauges by pattern) is behind a `Locked`.
public final class ProxyMetrics: Sendable {
    /// What happened to one client connection.
    public enum ConnectionOutcome: String, Sendable, CaseIterable {
        case allowed
        case refused
        /// `enforce = false`: allowed, but the entry would have refused.
        case wouldRefuse = "would_refuse"
        /// The client left before its tunnel opened (while pinproxy resolved, connected or
        /// handshook upstream): no decision was sent.
        case clientGone = "client_gone"
    }

    /// The `Content-Type` of `render()`: the Prometheus text format.
    public static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    /// The registry, for a caller that wants to add its own series.
    public let registry: PrometheusCollectorRegistry

    private let openTunnels: Gauge
    private let bytesToUpstream: Counter
    private let bytesToClient: Counter
    private let handshakeSeconds: ValueHistogram
    private let verificationSeconds: ValueHistogram
    private let pinExpiryGauges = Locked<[String: Gauge]>([:])
    /// Counters resolved once, so a connection costs an increment, not a registry look-up
    /// (which builds the label set and takes the registry's lock).
    private let allowedConnections: Counter
    private let clientLookupsFound: Counter
    private let clientLookupsUnknown: Counter
    private let reopenVerdictChanges: Counter
    private let outcomeCounters = Locked<[CounterKey: Counter]>([:])
    private let refusalCounters = Locked<[RefusalKey: Counter]>([:])

    private struct CounterKey: Hashable {
        let outcome: ConnectionOutcome
        let reason: RefusalReason?
        let listener: ListenerKind
        let client: String
    }

    private struct RefusalKey: Hashable {
        let hostPattern: String
        let reason: RefusalReason
        let reportOnly: Bool
        let client: String
    }

    private enum Name {
        static let connections = "pinproxy_connections_total"
        static let refusals = "pinproxy_refusals_total"
        static let reopenVerdictChanges = "pinproxy_reopen_verdict_changes_total"
        static let openTunnels = "pinproxy_open_tunnels"
        static let relayedBytes = "pinproxy_relayed_bytes_total"
        static let handshake = "pinproxy_upstream_handshake_seconds"
        static let verification = "pinproxy_verification_seconds"
        static let reloads = "pinproxy_config_reloads_total"
        static let pinExpiry = "pinproxy_pin_expiry_days"
        static let clientLookups = "pinproxy_client_lookups_total"
    }

    private enum Help {
        static let connections = "Client connections by outcome and refusal reason."
        static let refusals = "Refusals (and report-only would-refuse decisions) by host pattern and reason."
        static let reopenVerdictChanges = "Upstreams reopened for the client's ALPN offer whose verdict differs from the first upstream's."
        static let openTunnels = "Tunnels currently open."
        static let relayedBytes = "Bytes relayed through tunnels, by direction."
        static let handshake = "Upstream TLS handshake duration in seconds."
        static let verification = "Certificate chain, host and pin verification duration in seconds."
        static let reloads = "Configuration reloads by result."
        static let pinExpiry = "Days until the entry's earliest pinned certificate or expires date runs out."
        static let clientLookups = "Sockets of local clients looked up ([clients]): found, or unknown (gone, not established, not held by a process)."
    }

    /// Upstream handshakes: a few ms on a LAN to seconds across the world.
    public static let handshakeBuckets: [Double] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
    /// Verification is local CPU work (plus CRL/OCSP checks already in memory).
    public static let verificationBuckets: [Double] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25]

    /// Creates the series on a new registry (or `registry`); counters that should read 0 from the
    /// first scrape (reloads, bytes, allowed connections, reopen verdict changes) are created at once.
    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
        openTunnels = registry.makeGauge(descriptor: .named(Name.openTunnels, help: Help.openTunnels))
        bytesToUpstream = registry.makeCounter(descriptor: .named(Name.relayedBytes, help: Help.relayedBytes),
                                               labels: [("direction", "client_to_upstream")])
        bytesToClient = registry.makeCounter(descriptor: .named(Name.relayedBytes, help: Help.relayedBytes),
                                             labels: [("direction", "upstream_to_client")])
        handshakeSeconds = registry.makeValueHistogram(descriptor: .named(Name.handshake, help: Help.handshake),
                                                       buckets: Self.handshakeBuckets)
        verificationSeconds = registry.makeValueHistogram(descriptor: .named(Name.verification, help: Help.verification),
                                                          buckets: Self.verificationBuckets)
        allowedConnections = registry.makeCounter(descriptor: .named(Name.connections, help: Help.connections),
                                                  labels: [("outcome", ConnectionOutcome.allowed.rawValue), ("reason", "none"),
                                                           ("listener", ListenerKind.connect.rawValue), ("client", Self.noClientLabel)])
        clientLookupsFound = registry.makeCounter(descriptor: .named(Name.clientLookups, help: Help.clientLookups), labels: [("result", "found")])
        clientLookupsUnknown = registry.makeCounter(descriptor: .named(Name.clientLookups, help: Help.clientLookups), labels: [("result", "unknown")])
        reopenVerdictChanges = registry.makeCounter(descriptor: .named(Name.reopenVerdictChanges, help: Help.reopenVerdictChanges))
        _ = reloadCounter(ok: true)
        _ = reloadCounter(ok: false)
    }

    // MARK: Connections and refusals

    /// Counts one client connection's outcome; `reason` is nil for a plain allow, `client` the
    /// matching `[clients]` sections (`ClientDecision.metricLabel`).
    public func connection(outcome: ConnectionOutcome, reason: RefusalReason?, listener: ListenerKind = .connect,
                           client: String = noClientLabel) {
        if outcome == .allowed, reason == nil, listener == .connect, client == Self.noClientLabel { return allowedConnections.increment() }
        connectionCounter(CounterKey(outcome: outcome, reason: reason, listener: listener, client: client)).increment()
    }

    /// The `client` label of a connection no `[clients]` section matched.
    public static let noClientLabel = "none"

    /// A local client's socket was looked up: `found` established and held by a process.
    public func clientLookup(found: Bool) {
        (found ? clientLookupsFound : clientLookupsUnknown).increment()
    }

    /// Counts a refusal against the entry that decided it (`hostPattern`: see
    /// `patternLabel(for:)`); `reportOnly` for an `enforce = false` entry's would-refuse.
    public func refusal(hostPattern: String, reason: RefusalReason, reportOnly: Bool = false, client: String = noClientLabel) {
        let key = RefusalKey(hostPattern: hostPattern, reason: reason, reportOnly: reportOnly, client: client)
        refusalCounters.withLock { counters in
            if let counter = counters[key] { return counter }
            let counter = registry.makeCounter(
                descriptor: .named(Name.refusals, help: Help.refusals),
                labels: [("host_pattern", hostPattern), ("reason", reason.traits.metricLabel),
                         ("mode", reportOnly ? "report_only" : "enforce"), ("client", client)]
            )
            counters[key] = counter
            return counter
        }.increment()
    }

    /// An upstream reopened for the client's ALPN offer got another verdict than the first
    /// upstream, which the client's 200 described.
    public func reopenVerdictChanged() {
        reopenVerdictChanges.increment()
    }

    /// The `host_pattern` label for an entry: its pattern as written and normalised, or
    /// `defaultPatternLabel` for `[default]`.
    public static func patternLabel(for entry: PolicyEntry) -> String {
        entry.pattern?.description ?? defaultPatternLabel
    }

    /// The label of the `[default]` entry: brackets, which no host pattern may hold, so that
    /// `[hosts."default"]` keeps a series of its own.
    public static let defaultPatternLabel = "[default]"

    /// The label for a refusal decided before any entry applied (bad request, say).
    public static let noPatternLabel = "-"

    // MARK: Tunnels

    /// A tunnel opened (after both handshakes).
    public func tunnelOpened() {
        openTunnels.increment()
    }

    /// Adds relayed bytes while a tunnel is open, so long tunnels show up before they close.
    public func relayed(bytesUp: UInt64, bytesDown: UInt64) {
        if bytesUp > 0 { bytesToUpstream.increment(by: Int64(clamping: bytesUp)) }
        if bytesDown > 0 { bytesToClient.increment(by: Int64(clamping: bytesDown)) }
    }

    /// A tunnel closed (its bytes were counted by `relayed` as they went).
    public func tunnelClosed() {
        openTunnels.decrement()
    }

    // MARK: Latency

    /// One upstream TLS handshake took `seconds`.
    public func handshakeLatency(_ seconds: Double) {
        handshakeSeconds.record(seconds)
    }

    /// One verification (chain, host, pins, revocation) took `seconds`.
    public func verificationLatency(_ seconds: Double) {
        verificationSeconds.record(seconds)
    }

    // MARK: Reloads and pins

    /// A SIGHUP reload finished: `ok` when the new config replaced the old one.
    public func reload(ok: Bool) {
        reloadCounter(ok: ok).increment()
    }

    /// Replaces the pin-expiry series with `entries`: a pattern no longer listed is removed.
    /// Call at startup and after each successful reload (and daily, so the days count down),
    /// typically with `pinExpiryEntries(in:now:)`.
    public func setPinExpiry(entries: [(pattern: String, days: Double)]) {
        pinExpiryGauges.withLock { gauges in
            var next: [String: Gauge] = [:]
            for (pattern, days) in entries {
                let gauge = gauges[pattern] ?? registry.makeGauge(
                    descriptor: .named(Name.pinExpiry, help: Help.pinExpiry), labels: [("host_pattern", pattern)])
                gauge.set(days)
                next[pattern] = gauge
            }
            for (pattern, gauge) in gauges where next[pattern] == nil {
                registry.unregisterGauge(gauge)
            }
            gauges = next
        }
    }

    /// For every pinned entry of `table` (pins or pinned certificates, `[default]` included),
    /// the days from `now` until the earliest of its pinned certificates' `notAfter` and its
    /// `expires` date. An entry pinning only digests, without `expires`, has no such date and is
    /// left out.
    public static func pinExpiryEntries(in table: PolicyTable, now: Date = Date()) -> [(pattern: String, days: Double)] {
        ([table.defaultEntry] + table.entries).compactMap { entry in
            let policy = entry.policy
            guard !policy.pins.isEmpty || !policy.pinnedCertificates.isEmpty else { return nil }
            let dates = policy.pinnedCertificates.map(\.notAfter) + [policy.pinsExpireAt].compactMap { $0 }
            guard let earliest = dates.min() else { return nil }
            return (patternLabel(for: entry), earliest.timeIntervalSince(now) / 86_400)
        }
    }

    // MARK: Exposition

    /// The Prometheus text exposition of every series.
    public func render() -> String {
        registry.emitToString()
    }

    /// `/metrics` (this object's `render()`) and `/healthz` (200 `ok` while `healthy()`, else
    /// 503), for `AdminHTTPServer`.
    public func adminRoutes(healthy: @escaping @Sendable () -> Bool = { true }) -> [String: AdminHTTPHandler] {
        [
            "/metrics": { [self] in
                AdminHTTPResponse(status: 200, contentType: Self.contentType, body: self.render())
            },
            "/healthz": {
                healthy()
                    ? AdminHTTPResponse(status: 200, contentType: "text/plain; charset=utf-8", body: "ok\n")
                    : AdminHTTPResponse(status: 503, contentType: "text/plain; charset=utf-8", body: "unhealthy\n")
            },
        ]
    }

    // MARK: Private

    private func connectionCounter(_ key: CounterKey) -> Counter {
        outcomeCounters.withLock { counters in
            if let counter = counters[key] { return counter }
            let counter = registry.makeCounter(
                descriptor: .named(Name.connections, help: Help.connections),
                labels: [("outcome", key.outcome.rawValue), ("reason", key.reason?.traits.metricLabel ?? "none"), ("listener", key.listener.rawValue),
                         ("client", key.client)]
            )
            counters[key] = counter
            return counter
        }
    }

    private func reloadCounter(ok: Bool) -> Counter {
        registry.makeCounter(descriptor: .named(Name.reloads, help: Help.reloads), labels: [("result", ok ? "ok" : "failed")])
    }
}

extension MetricNameDescriptor {
    /// A metric called exactly `name` (no namespace, subsystem or unit joined to it), with `help`.
    static func named(_ name: String, help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
    }
}
