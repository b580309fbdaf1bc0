import Foundation
import PinproxyInterop
import PinproxyPolicy
import Prometheus

/// A pin-failure report: the fields of RFC 7469 §3 (HPKP's report-uri format) plus pinproxy's
/// reason, entry, detail and whether the connection was refused or only reported.
public enum PinFailureReport {
    /// The report on `verdict` for a connection to `host`:`port` at `time`, as one JSON object;
    /// with `client`, it says who the client was (`pinproxy-client`).
    public static func json(verdict: Verdict, host: TargetHost, port: UInt16, at time: Date, client: ClientIdentity? = nil) -> Data {
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
        return (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
    }
}

/// Sends pin-failure reports to every `report_to` destination, off the event loops: each
/// destination has its own thread and a bounded queue that drops (and counts) rather than
/// grows, and every host may cause at most `perHostPerMinute` reports a minute.
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

    private let sinks: [Sink]
    private let limiter = Locked<RateLimiter>(RateLimiter())
    private let perHostPerMinute: Int
    private let dropped: Counter
    private let queued: Counter

    public init(destinations: [ReportDestination], registry: PrometheusCollectorRegistry, capacity: Int = 100,
                perHostPerMinute: Int = 10, timeout: TimeInterval = 10,
                checkCollector: @escaping CollectorCheck, resolve: @escaping Resolver, log: @escaping LogLine) {
        self.perHostPerMinute = perHostPerMinute
        let descriptor = MetricNameDescriptor.named("pinproxy_reports_total", help: "Pin-failure reports by result (report_to).")
        queued = registry.makeCounter(descriptor: descriptor, labels: [("result", "queued")])
        dropped = registry.makeCounter(descriptor: descriptor, labels: [("result", "dropped")])
        let sent = registry.makeCounter(descriptor: descriptor, labels: [("result", "sent")])
        let counters = Sink.Counters(sent: sent, dropped: dropped)
        sinks = destinations.map { destination in
            Sink(destination: destination, capacity: capacity, timeout: timeout, counters: counters,
                 checkCollector: checkCollector, resolve: resolve, log: log)
        }
    }

    /// Queues a report about `host`:`port` for every destination; never blocks.
    public func submit(_ json: Data, host: TargetHost, port: UInt16) {
        let name = host.description.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        let allowed = limiter.withLock { $0.admit(name, limit: perHostPerMinute, now: ProcessLimits.monotonicSeconds()) }
        guard allowed else {
            dropped.increment(by: Int64(sinks.count))
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

/// At most `limit` admissions per host per minute (a fixed one-minute window per host).
struct RateLimiter {
    private var windows: [String: (start: TimeInterval, count: Int)] = [:]

    mutating func admit(_ host: String, limit: Int, now: TimeInterval) -> Bool {
        if windows.count > 10_000 { windows = windows.filter { now - $0.value.start < 60 } }
        var window = windows[host] ?? (now, 0)
        if now - window.start >= 60 { window = (now, 0) }
        guard window.count < limit else { return false }
        window.count += 1
        windows[host] = window
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
         checkCollector: @escaping PinFailureReporter.CollectorCheck, resolve: @escaping PinFailureReporter.Resolver,
         log: @escaping PinFailureReporter.LogLine) {
        self.destination = destination
        self.capacity = capacity
        self.timeout = timeout
        self.counters = counters
        self.checkCollector = checkCollector
        self.resolve = resolve
        self.log = log
        let thread = Thread { [self] in
            self.run()
            OpenSSLLifetime.endThread()
        }
        thread.name = "pinproxy-reports"
        thread.start()
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
        var file: Int32 = -1
        defer {
            if file >= 0 { close(file) }
            finished.signal()
        }
        while true {
            wake.wait()
            let (batch, reopen, stopping) = state.withLock { state -> ([PinFailureReporter.Pending], Bool, Bool) in
                let take = Array(state.queue.prefix(Self.batchSize))
                state.queue.removeFirst(take.count)
                let reopen = state.reopen
                state.reopen = false
                return (take, reopen, state.stopping)
            }
            if reopen, file >= 0 { close(file); file = -1 }
            if !batch.isEmpty {
                switch destination {
                case .file(let path):
                    if file < 0 { file = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o640) }
                    if file < 0 {
                        log(false, "cannot open the report file \(path): \(String(cString: strerror(errno))); \(batch.count) report(s) dropped")
                        counters.dropped.increment(by: Int64(batch.count))
                    } else {
                        writeLines(batch, to: file, path: path)
                    }
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

    private func writeLines(_ batch: [PinFailureReporter.Pending], to file: Int32, path: String) {
        var bytes = Data()
        for report in batch { bytes.append(report.json); bytes.append(UInt8(ascii: "\n")) }
        let written = bytes.withUnsafeBytes { write(file, $0.baseAddress, $0.count) }
        if written == bytes.count {
            counters.sent.increment(by: Int64(batch.count))
        } else {
            log(false, "cannot write to the report file \(path): \(String(cString: strerror(errno)))")
            counters.dropped.increment(by: Int64(batch.count))
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

    /// One POST over a connection the daemon's own verdict accepted.
    private func deliver(_ body: Data, host: String, port: UInt16, path: String) throws {
        guard let target = TargetHost(host) else { throw DeliveryError(description: "\(host) is not a host name") }
        let connection = try BlockingTLSConnection(host: resolve(host), port: port, serverName: target.serverName,
                                                   alpn: ["http/1.1"], timeout: timeout)
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
