import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import Prometheus

/// The daemon's Prometheus metrics, exposed on `/metrics` when `metrics_listen` is set.
///
/// Owns a `PrometheusCollectorRegistry` (swift-prometheus), which renders the text exposition
/// format; `render()` adds the standard `process_*` metrics, read from `/proc` at each scrape,
/// and the `# HELP`/`# TYPE` lines of every family in `families` that has no series yet, so that
/// each family is there from the first scrape. `docs/logs-and-metrics.md` lists them all.
///
/// Label values are the log's: `outcome` is `ConnectionOutcome`, `reason` a `RefusalReason`,
/// `mode` `enforce` or `report-only`, `listener` a `ListenerKind`, `client` the `[clients]`
/// sections that matched the connection's client, joined in config order
/// (`ClientDecision.metricLabel`), or `none`: never a path or pid the config does not name. Labels are bounded:
/// `host_pattern` is always a configured pattern (`[default]` for the `[default]` entry, which no
/// pattern can spell, `-` before any entry applies), never a requested host name, and per-entry
/// gauges exist only for entries with pins (pin expiry) or one exact host (upstream certificate
/// expiry).
///
/// Thread safety: every method may be called from any thread at any time, concurrently — the
/// daemon's event loops each call it. swift-prometheus's registry, `Counter`, `Gauge` and
/// `Histogram` are `Sendable` and lock or use atomics internally; the state this class adds
/// (the per-entry gauges) is behind `Locked`s.
public final class ProxyMetrics: Sendable {
    /// The `Content-Type` of `render()`: the Prometheus text format.
    public static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    /// The registry, for a caller that wants to add its own series.
    public let registry: PrometheusCollectorRegistry

    private let openTunnels: Gauge
    private let bytesToUpstream: Counter
    private let bytesToClient: Counter
    private let handshakeSeconds: ValueHistogram
    private let verificationSeconds: ValueHistogram
    private let lastReloadSuccessful: Gauge
    private let lastReloadSuccessTime: Gauge
    private let pinExpiryGauges = Locked<[String: PinExpiryGauges]>([:])
    /// When the CT log list in force was published; nil without one.
    private let ctLogListPublished = Locked<Date?>(nil)
    private let ctSCTCounters = Locked<[String: Counter]>([:])
    private let upstreamExpiry = Locked<UpstreamExpiry>(UpstreamExpiry())
    /// Counters resolved once, so a connection costs an increment, not a registry look-up
    /// (which builds the label set and takes the registry's lock).
    private let allowedConnections: Counter
    private let clientLookupsFound: Counter
    private let clientLookupsUnknown: Counter
    private let reopenVerdictChanges: Counter
    private let mintedLeaves: Counter
    private let foreignTransparentListeners: Counter
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

    private struct PinExpiryGauges {
        let days: Gauge
        let timestamp: Gauge
    }

    /// The policy in force and the upstream-certificate gauges of its one-host entries.
    private struct UpstreamExpiry {
        var table: PolicyTable?
        var gauges: [String: Gauge] = [:]
    }

    /// One metric family: what `# HELP` and `# TYPE` say about it.
    public struct Family: Sendable {
        public let name: String
        public let type: String
        public let help: String

        var descriptor: MetricNameDescriptor { .named(name, help: help) }
    }

    /// The families the daemon exports (the `process_*` ones too), each from the first scrape.
    public static let families: [Family] = [
        Family.connections, .refusals, .reopenVerdictChanges, .openTunnels, .relayedBytes, .handshake, .verification, .reloads,
        .lastReloadSuccessful, .lastReloadSuccessTime, .pinExpiryTimestamp, .pinExpiryDays, .upstreamCertificateExpiry,
        .buildInfo, .reports, .mintedLeaves, .clientLookups, .ctLogListAge, .ctSCTs, .foreignTransparentListeners,
    ] + ProcessFamily.allCases.map(\.family)

    /// Upstream handshakes: a few ms on a LAN to seconds across the world.
    public static let handshakeBuckets: [Double] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
    /// Verification is local CPU work (plus CRL/OCSP checks already in memory).
    public static let verificationBuckets: [Double] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25]

    /// Creates the series on a new registry (or `registry`): counters that should read 0 from the
    /// first scrape (reloads, bytes, allowed and tunnel connections, reopen verdict changes, minted leaves) at once, `pinproxy_build_info` for
    /// `version` and `commit`, and the reload gauges as of a successful load `loadedAt`.
    public init(version: String, commit: String, loadedAt: Date = Date(),
                registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
        openTunnels = registry.makeGauge(descriptor: Family.openTunnels.descriptor)
        bytesToUpstream = registry.makeCounter(descriptor: Family.relayedBytes.descriptor, labels: [("direction", "client_to_upstream")])
        bytesToClient = registry.makeCounter(descriptor: Family.relayedBytes.descriptor, labels: [("direction", "upstream_to_client")])
        handshakeSeconds = registry.makeValueHistogram(descriptor: Family.handshake.descriptor, buckets: Self.handshakeBuckets)
        verificationSeconds = registry.makeValueHistogram(descriptor: Family.verification.descriptor, buckets: Self.verificationBuckets)
        allowedConnections = registry.makeCounter(descriptor: Family.connections.descriptor,
                                                  labels: [("outcome", ConnectionOutcome.allowed.rawValue), ("reason", "none"),
                                                           ("listener", ListenerKind.connect.rawValue), ("client", Self.noClientLabel)])
        lastReloadSuccessful = registry.makeGauge(descriptor: Family.lastReloadSuccessful.descriptor)
        lastReloadSuccessTime = registry.makeGauge(descriptor: Family.lastReloadSuccessTime.descriptor)
        lastReloadSuccessful.set(1.0)
        lastReloadSuccessTime.set(loadedAt.timeIntervalSince1970)
        registry.makeGauge(descriptor: Family.buildInfo.descriptor, labels: [("version", version), ("commit", commit)]).set(1.0)
        reopenVerdictChanges = registry.makeCounter(descriptor: Family.reopenVerdictChanges.descriptor)
        mintedLeaves = registry.makeCounter(descriptor: Family.mintedLeaves.descriptor)
        foreignTransparentListeners = registry.makeCounter(descriptor: Family.foreignTransparentListeners.descriptor)
        clientLookupsFound = registry.makeCounter(descriptor: Family.clientLookups.descriptor, labels: [("result", "found")])
        clientLookupsUnknown = registry.makeCounter(descriptor: Family.clientLookups.descriptor, labels: [("result", "unknown")])
        _ = connectionCounter(CounterKey(outcome: .tunnel, reason: nil, listener: .connect, client: Self.noClientLabel))
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
                descriptor: Family.refusals.descriptor,
                labels: [("host_pattern", hostPattern), ("reason", reason.rawValue),
                         ("mode", reportOnly ? ConnectionOutcome.reportOnly.rawValue : "enforce"), ("client", client)]
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

    /// The local CA minted a leaf (its cache had none for the host, or an expiring one).
    public func leafMinted() {
        mintedLeaves.increment()
    }

    /// A check found a socket that is not pinproxy's listening on a transparent address.
    public func foreignTransparentListener() {
        foreignTransparentListeners.increment()
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

    // MARK: Reloads, pins and upstream certificates

    /// A SIGHUP reload finished at `time`: `ok` when the new config replaced the old one.
    public func reload(ok: Bool, at time: Date = Date()) {
        reloadCounter(ok: ok).increment()
        lastReloadSuccessful.set(ok ? 1.0 : 0.0)
        if ok { lastReloadSuccessTime.set(time.timeIntervalSince1970) }
    }

    /// The policy `table` is in force (at start, after each successful reload, and hourly so
    /// that the days count down): the pin-expiry series become its pinned entries', and the
    /// upstream-certificate series of entries it no longer has (as one exact host) go.
    public func policyInForce(_ table: PolicyTable, now: Date = Date()) {
        setPinExpiry(entries: Self.pinExpiryEntries(in: table), now: now)
        upstreamExpiry.withLock { state in
            state.table = table
            for (pattern, gauge) in state.gauges where Self.oneHostEntry(pattern, in: table) == nil {
                registry.unregisterGauge(gauge)
                state.gauges[pattern] = nil
            }
        }
    }

    /// Replaces the pin-expiry series with `entries`: a pattern no longer listed is removed.
    public func setPinExpiry(entries: [(pattern: String, expiresAt: Date)], now: Date = Date()) {
        pinExpiryGauges.withLock { gauges in
            var next: [String: PinExpiryGauges] = [:]
            for (pattern, expiresAt) in entries {
                let pair = gauges[pattern] ?? PinExpiryGauges(
                    days: registry.makeGauge(descriptor: Family.pinExpiryDays.descriptor, labels: [("host_pattern", pattern)]),
                    timestamp: registry.makeGauge(descriptor: Family.pinExpiryTimestamp.descriptor, labels: [("host_pattern", pattern)]))
                pair.days.set(expiresAt.timeIntervalSince(now) / 86_400)
                pair.timestamp.set(expiresAt.timeIntervalSince1970)
                next[pattern] = pair
            }
            for (pattern, pair) in gauges where next[pattern] == nil {
                registry.unregisterGauge(pair.days)
                registry.unregisterGauge(pair.timestamp)
            }
            gauges = next
        }
    }

    /// For every pinned entry of `table` (pins or pinned certificates, `[default]` included),
    /// the earliest of its pinned certificates' `notAfter` and the end of its `expires` day
    /// (00:00Z the day after). An entry pinning only digests, without `expires`, has no such
    /// date and is left out.
    public static func pinExpiryEntries(in table: PolicyTable) -> [(pattern: String, expiresAt: Date)] {
        ([table.defaultEntry] + table.entries).compactMap { entry in
            let policy = entry.policy
            guard !policy.pins.isEmpty || !policy.pinnedCertificates.isEmpty else { return nil }
            let dates = policy.pinnedCertificates.map(\.notAfter) + [policy.pinsExpireAt].compactMap { $0 }
            guard let earliest = dates.min() else { return nil }
            return (patternLabel(for: entry), earliest)
        }
    }

    /// The chain verified for a connection under `entry` (leaf first, as `Verdict.verified`):
    /// when the entry names one exact host and is still in force, its
    /// `pinproxy_upstream_certificate_expiry_timestamp_seconds` becomes the earliest `notAfter`
    /// of the leaf and intermediates (a self-issued root at the end is not the server's to renew).
    public func upstreamChainVerified(_ chain: [Certificate], entry: PolicyEntry) {
        guard Self.namesOneHost(entry), let pattern = entry.pattern,
              let earliest = chain.enumerated().filter({ $0.offset == 0 || !$0.element.isSelfIssued }).map(\.element.notAfter).min()
        else { return }
        let label = pattern.description
        upstreamExpiry.withLock { state in
            guard let table = state.table, Self.oneHostEntry(label, in: table) != nil else { return }
            let gauge = state.gauges[label] ?? registry.makeGauge(descriptor: Family.upstreamCertificateExpiry.descriptor,
                                                                   labels: [("host_pattern", label)])
            gauge.set(earliest.timeIntervalSince1970)
            state.gauges[label] = gauge
        }
    }

    /// Whether `entry` names exactly one host: an exact name without `include_subdomains`, or
    /// an IP address. The hosts a pattern covers would make one series flap between them.
    static func namesOneHost(_ entry: PolicyEntry) -> Bool {
        switch entry.pattern {
        case .exact: return !entry.policy.includeSubdomains
        case .ip: return true
        case .wildcard, nil: return false
        }
    }

    /// The entry of `table` whose pattern is `label` when it names one host.
    private static func oneHostEntry(_ label: String, in table: PolicyTable) -> PolicyEntry? {
        guard let host = TargetHost(label) else { return nil }
        let entry = table.lookup(host)
        return entry.pattern?.description == label && namesOneHost(entry) ? entry : nil
    }

    // MARK: Certificate Transparency

    /// The CT log list in force was published at `published` (nil: no list): its age is
    /// exported at each scrape.
    public func ctLogListInForce(published: Date?) {
        ctLogListPublished.withLock { $0 = published }
    }

    /// One SCT found on a new upstream connection, from `source`, `counted` or not.
    public func sctFound(source: String, counted: Bool) {
        let key = source + (counted ? "|yes" : "|no")
        let counter = ctSCTCounters.withLock { counters in
            if let counter = counters[key] { return counter }
            let counter = registry.makeCounter(descriptor: Family.ctSCTs.descriptor, labels: [("source", source), ("counted", counted ? "yes" : "no")])
            counters[key] = counter
            return counter
        }
        counter.increment()
    }

    // MARK: Exposition

    /// The Prometheus text exposition of every series, the `process_*` metrics read now, and
    /// the `# HELP`/`# TYPE` of every family that has no series yet.
    public func render() -> String {
        var text = registry.emitToString()
        if let stats = ProcessStats.current() {
            for family in ProcessFamily.allCases {
                text += family.family.header + "\(family.name) \(family.value(in: stats))\n"
            }
        }
        if let published = ctLogListPublished.withLock({ $0 }) {
            text += Family.ctLogListAge.header + "\(Family.ctLogListAge.name) \(Date().timeIntervalSince(published).rounded(.down))\n"
        }
        var present = Set<Substring>()
        for line in text.split(separator: "\n") where line.hasPrefix("# TYPE ") {
            present.insert(line.dropFirst(7).prefix { $0 != " " })
        }
        for family in Self.families where !present.contains(Substring(family.name)) {
            text += family.header
        }
        return text
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
                descriptor: Family.connections.descriptor,
                labels: [("outcome", key.outcome.rawValue), ("reason", key.reason?.rawValue ?? "none"), ("listener", key.listener.rawValue),
                         ("client", key.client)]
            )
            counters[key] = counter
            return counter
        }
    }

    private func reloadCounter(ok: Bool) -> Counter {
        registry.makeCounter(descriptor: Family.reloads.descriptor, labels: [("result", ok ? "ok" : "failed")])
    }
}

extension MetricNameDescriptor {
    /// A metric called exactly `name` (no namespace, subsystem or unit joined to it), with `help`.
    static func named(_ name: String, help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
    }
}
