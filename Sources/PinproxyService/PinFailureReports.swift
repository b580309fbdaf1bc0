import Foundation
import PinproxyInterop
import PinproxyPolicy
import Prometheus

/// A pin-failure report: the fields of RFC 7469 §3 (HPKP's report-uri format) plus pinproxy's
/// reason, entry, detail and whether the connection was refused or only reported.
public enum PinFailureReport {
    /// The report on `verdict` for a connection to `host`:`port` at `time`, as one JSON object;
    /// with `client`, it says who the client was (`pinproxy-client`); nil if it cannot be serialised.
    public static func json(verdict: Verdict, host: TargetHost, port: UInt16, at time: Date, client: ClientIdentity? = nil) -> Data? {
        let policy = verdict.entry.policy
        let knownPins = policy.pins.map { pin -> String in
            let value = pin.description.dropFirst("sha256/".count)
            return policy.pinKind == .certificate ? "cert-sha256=\"\(value)\"" : "pin-sha256=\"\(value)\""
        }
        var object: [String: Any] = [
            "date-time": rfc3339(time),
            "hostname": host.description.trimmingCharacters(in: CharacterSet(charactersIn: "[]")),
            "port": Int(port),
            "effective-expiration-date": policy.pinsExpireAt.map(rfc3339) ?? NSNull(),
            "include-subdomains": policy.includeSubdomains,
            "noted-hostname": verdict.entry.pattern?.description ?? "",
            "served-certificate-chain": verdict.presented.map(\.pem),
            "validated-certificate-chain": verdict.verified.map(\.pem),
            "known-pins": knownPins,
            "pinproxy-reason": verdict.reason?.rawValue ?? "",
            "pinproxy-entry": verdict.entry.name,
            "pinproxy-enforced": !verdict.allowsConnection,
            "pinproxy-detail": verdict.failures.map(\.description).joined(separator: "; "),
        ]
        switch client {
        case .local(let local):
            object["pinproxy-client"] = ["uid": Int(local.uid), "user": local.user as Any, "unit": local.unit as Any, "exe": local.exe as Any]
                .compactMapValues { $0 is String || $0 is Int ? $0 : nil }
        case .unknown: object["pinproxy-client"] = "unknown"
        case .remote: object["pinproxy-client"] = "remote"
        case nil: break
        }
        guard JSONSerialization.isValidJSONObject(object) else { return nil }
        return try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
    }
}

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

    private let sinks: [Sink]
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
        let counters = Sink.Counters(sent: sent, dropped: dropped)
        sinks = destinations.map { destination in
            Sink(destination: destination, capacity: capacity, timeout: timeout, counters: counters, limits: limits,
                 checkCollector: checkCollector, resolve: resolve, log: log)
        }
    }

    /// Queues the report `make` returns about `host`:`port` for every destination; never blocks.
    /// `make` runs only when the rate limits admit the report; one it cannot make (nil) is
    /// dropped and logged, never sent empty.
    public func submit(host: TargetHost, port: UInt16, report make: () -> Data?) {
        let name = host.description.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
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

/// At most `perHost` admissions per host and `overall` for all hosts together per minute (fixed
/// one-minute windows). A host refused by either limit uses up neither.
struct RateLimiter {
    private var overallWindow: (start: TimeInterval, count: Int) = (-.infinity, 0)
    private var windows: [String: (start: TimeInterval, count: Int)] = [:]
    /// The next pruning of ended windows, when this many hosts have one.
    private var pruneAt = 10_000

    mutating func admit(_ host: String, perHost: Int, overall: Int, now: TimeInterval) -> Bool {
        if now - overallWindow.start >= 60 { overallWindow = (now, 0) }
        guard overallWindow.count < overall else { return false }
        if windows.count > pruneAt {
            windows = windows.filter { now - $0.value.start < 60 }
            pruneAt = max(10_000, 2 * windows.count)
        }
        var window = windows[host] ?? (now, 0)
        if now - window.start >= 60 { window = (now, 0) }
        guard window.count < perHost else { return false }
        window.count += 1
        windows[host] = window
        overallWindow.count += 1
        return true
    }
}

/// One destination: a thread that drains its bounded queue.
private final class Sink: @unchecked Sendable {
    struct Counters: Sendable {
        let sent: Counter
        let dropped: Counter
    }

    /// POSTs carry at most this many reports (a JSON array).
    static let batchSize = 50
    /// Attempts per HTTPS batch before it is dropped, with backoff doubling from 1 s to 60 s.
    static let attempts = 5

    let destination: ReportDestination
    private let capacity: Int
    private let timeout: TimeInterval
    private let counters: Counters
    private let limits: PinFailureReporter.CurrentLimits
    private let checkCollector: PinFailureReporter.CollectorCheck
    private let resolve: PinFailureReporter.Resolver
    private let log: PinFailureReporter.LogLine
    private let state = Locked<State>(State())
    private let wake = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)

    struct State {
        var queue: [PinFailureReporter.Pending] = []
        var reopen = false
        var stopping = false
    }

    init(destination: ReportDestination, capacity: Int, timeout: TimeInterval, counters: Counters,
         limits: @escaping PinFailureReporter.CurrentLimits,
         checkCollector: @escaping PinFailureReporter.CollectorCheck, resolve: @escaping PinFailureReporter.Resolver,
         log: @escaping PinFailureReporter.LogLine) {
        self.destination = destination
        self.capacity = capacity
        self.timeout = timeout
        self.counters = counters
        self.limits = limits
        self.checkCollector = checkCollector
        self.resolve = resolve
        self.log = log
        let thread = Thread { [self] in
            self.run()
            OpenSSLLifetime.endThread()
        }
        thread.name = "pinproxy-reports"
        thread.start()
        // A file is opened at start, so that a path that is refused is logged at once.
        if case .file = destination { reopen() }
    }

    /// A report about the collector itself never goes to that collector (its failure would
    /// only produce more reports).
    func accepts(host: String, port: UInt16) -> Bool {
        if case .https(let collector, let collectorPort, _) = destination { return !(collector == host && collectorPort == port) }
        return true
    }

    func enqueue(_ report: PinFailureReporter.Pending) -> Bool {
        let added = state.withLock { state -> Bool in
            guard !state.stopping, state.queue.count < capacity else { return false }
            state.queue.append(report)
            return true
        }
        if added { wake.signal() }
        return added
    }

    func reopen() {
        state.withLock { $0.reopen = true }
        wake.signal()
    }

    func stop() {
        state.withLock { $0.stopping = true }
        wake.signal()
        _ = finished.wait(timeout: .now() + 5)
    }

    private func run() {
        var file: ReportFile?
        if case .file(let path) = destination { file = ReportFile(path: path) }
        defer { finished.signal() }
        while true {
            wake.wait()
            let (batch, reopen, stopping) = state.withLock { state -> ([PinFailureReporter.Pending], Bool, Bool) in
                let take = Array(state.queue.prefix(Self.batchSize))
                state.queue.removeFirst(take.count)
                let reopen = state.reopen
                state.reopen = false
                return (take, reopen, state.stopping)
            }
            if reopen { file?.reopen(log: log) }
            if !batch.isEmpty {
                switch destination {
                case .file:
                    let written = file?.write(batch, maxBytes: limits().fileMaxBytes, log: log) ?? 0
                    counters.sent.increment(by: Int64(written))
                    counters.dropped.increment(by: Int64(batch.count - written))
                case .https(let host, let port, let path):
                    post(batch, host: host, port: port, path: path)
                }
            }
            let more = state.withLock { !$0.queue.isEmpty }
            if more { wake.signal() } else if stopping { return }
            if stopping, case .https = destination {
                let left = state.withLock { state -> Int in
                    defer { state.queue.removeAll() }
                    return state.queue.count
                }
                counters.dropped.increment(by: Int64(left))
                return
            }
        }
    }

    /// POSTs `batch` as a JSON array, retrying with backoff; drops it after the last attempt.
    private func post(_ batch: [PinFailureReporter.Pending], host: String, port: UInt16, path: String) {
        var body = Data("[".utf8)
        for (index, report) in batch.enumerated() {
            if index > 0 { body.append(UInt8(ascii: ",")) }
            body.append(report.json)
        }
        body.append(UInt8(ascii: "]"))
        var delay: TimeInterval = 1
        for attempt in 1...Self.attempts {
            do {
                try deliver(body, host: host, port: port, path: path)
                counters.sent.increment(by: Int64(batch.count))
                return
            } catch {
                let last = attempt == Self.attempts
                log(true, "reports to \(destination) not delivered (attempt \(attempt) of \(Self.attempts)): \(error)" + (last ? "; \(batch.count) report(s) dropped" : ""))
                if last { break }
                // Wait, unless told to stop; reports arriving meanwhile queue (or drop) as usual.
                let deadline = Date().addingTimeInterval(delay)
                while Date() < deadline {
                    if state.withLock({ $0.stopping }) { break }
                    _ = wake.wait(timeout: .now() + min(1, deadline.timeIntervalSinceNow))
                }
                if state.withLock({ $0.stopping }) { break }
                delay = min(60, delay * 2)
            }
        }
        counters.dropped.increment(by: Int64(batch.count))
        // The waits above consumed wake-ups meant for queued reports.
        wake.signal()
    }

    struct DeliveryError: Error, CustomStringConvertible {
        let description: String
    }

    /// One POST over a connection the daemon's own verdict accepted: connect, handshake, request
    /// and answer within one `timeout`.
    private func deliver(_ body: Data, host: String, port: UInt16, path: String) throws {
        guard let target = TargetHost(host) else { throw DeliveryError(description: "\(host) is not a host name") }
        let connection = try BlockingTLSConnection(host: resolve(host), port: port, serverName: target.serverName,
                                                   alpn: ["http/1.1"], deadline: Deadline(after: timeout))
        let verdict = checkCollector(connection.chain, target, port)
        guard verdict.allowsConnection else {
            throw DeliveryError(description: "the collector was refused: \(verdict.failures.map(\.description).joined(separator: "; "))")
        }
        let literal = host.contains(":") ? "[\(host)]" : host
        let head = "POST \(path) HTTP/1.1\r\nHost: \(literal)\(port == 443 ? "" : ":\(port)")\r\nContent-Type: application/json\r\nContent-Length: \(body.count)\r\nUser-Agent: pinproxy\r\nConnection: close\r\n\r\n"
        try connection.write(Array(head.utf8) + Array(body))
        let answer = try connection.readAll(limit: 8192)
        let statusLine = String(decoding: answer.prefix { $0 != UInt8(ascii: "\r") && $0 != UInt8(ascii: "\n") }, as: UTF8.self)
        let parts = statusLine.split(separator: " ")
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]) else {
            throw DeliveryError(description: "no HTTP answer from the collector")
        }
        guard (200..<300).contains(status) else { throw DeliveryError(description: "the collector answered \(statusLine)") }
    }
}
