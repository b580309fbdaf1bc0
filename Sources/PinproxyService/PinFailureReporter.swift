import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import Prometheus

/// Sends pin-failure reports to every `report_to` destination, off the event loops: each
/// destination has its own thread and a bounded queue that drops (and counts) rather than
/// grows; every host may cause at most `perHostPerMinute` reports a minute, and the daemon as a
/// whole `report_rate_limit`; a file is not written past `report_file_max_bytes`.
public final class PinFailureReporter: Sendable {
    /// One report waiting to go out: the host it is about, and its JSON.
    struct Pending: Sendable {
        let host: String
        let port: UInt16
        let json: Data
    }

    /// How a collector's TLS peer is judged: the daemon's verdict for that host, with its policy.
    public typealias CollectorCheck = @Sendable (_ chain: [Certificate], _ host: TargetHost, _ port: UInt16) -> Verdict
    /// Addresses to connect to for a collector host (the config's `[resolve]`, else the name).
    public typealias Resolver = @Sendable (_ host: String) -> String
    /// A line for the daemon's log: level (`warning`/`error`) and detail.
    public typealias LogLine = @Sendable (_ warning: Bool, _ detail: String) -> Void

    /// The limits a reload may change: read for every report and every batch written.
    public struct Limits: Sendable {
        /// `report_rate_limit`: reports a minute, all hosts together.
        public var perMinute: Int
        /// `report_file_max_bytes`.
        public var fileMaxBytes: Int

        public init(perMinute: Int, fileMaxBytes: Int) {
            self.perMinute = perMinute
            self.fileMaxBytes = fileMaxBytes
        }
    }

    /// The limits in force now.
    public typealias CurrentLimits = @Sendable () -> Limits

    private let sinks: [ReportSink]
    private let limiter = Locked<RateLimiter>(RateLimiter())
    private let perHostPerMinute: Int
    private let limits: CurrentLimits
    private let log: LogLine
    private let dropped: Counter
    private let queued: Counter

    public init(destinations: [ReportDestination], registry: PrometheusCollectorRegistry, capacity: Int = 100,
                perHostPerMinute: Int = 10, timeout: TimeInterval = 10, limits: @escaping CurrentLimits,
                checkCollector: @escaping CollectorCheck, resolve: @escaping Resolver, log: @escaping LogLine) {
        self.perHostPerMinute = perHostPerMinute
        self.limits = limits
        self.log = log
        let descriptor = ProxyMetrics.Family.reports.descriptor
        queued = registry.makeCounter(descriptor: descriptor, labels: [("result", "queued")])
        dropped = registry.makeCounter(descriptor: descriptor, labels: [("result", "dropped")])
        let sent = registry.makeCounter(descriptor: descriptor, labels: [("result", "sent")])
        let counters = ReportSink.Counters(sent: sent, dropped: dropped)
        sinks = destinations.map { destination in
            ReportSink(destination: destination, capacity: capacity, timeout: timeout, counters: counters, limits: limits,
                 checkCollector: checkCollector, resolve: resolve, log: log)
        }
    }

    /// Queues the report `make` returns about `host`:`port` for every destination; never blocks.
    /// `make` runs only when the rate limits admit the report; one it cannot make (nil) is
    /// dropped and logged, never sent empty.
    public func submit(host: TargetHost, port: UInt16, report make: () -> Data?) {
        let name = host.description.trimmingBrackets()
        let overall = limits().perMinute
        let allowed = limiter.withLock {
            $0.admit(name, perHost: perHostPerMinute, overall: overall, now: ProcessLimits.monotonicSeconds())
        }
        guard allowed else {
            dropped.increment(by: Int64(sinks.count))
            return
        }
        guard let json = make() else {
            dropped.increment(by: Int64(sinks.count))
            log(false, "the report about \(host):\(port) could not be serialised: dropped")
            return
        }
        for sink in sinks where sink.accepts(host: name, port: port) {
            if sink.enqueue(Pending(host: name, port: port, json: json)) { queued.increment() } else { dropped.increment() }
        }
    }

    /// Reopens the report files (after logrotate moved them): the daemon calls it on SIGHUP.
    public func reopenFiles() {
        for sink in sinks { sink.reopen() }
    }

    /// Stops the threads after what is queued for files is written; HTTPS reports still queued
    /// are dropped.
    public func stop() {
        for sink in sinks { sink.stop() }
    }
}
