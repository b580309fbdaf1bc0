import Dispatch
import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import Prometheus

/// One `report_to` destination: a thread that drains its bounded queue into a file
/// (`ReportFile`) or, in batches, to an HTTPS collector.
final class ReportSink: @unchecked Sendable {
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
        NamedThread.start(name: "pinproxy-reports") { [self] in
            self.run()
            OpenSSLLifetime.endThread()
        }
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
