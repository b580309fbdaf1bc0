import Foundation
import Logging
import PinproxyInterop
import PinproxyPolicy
import PinproxyService

extension RefusalReason {
    /// The HTTP status a refusal for this reason carries.
    public var httpStatus: Int {
        switch self {
        case .badRequest: return 400
        case .dnsFailure, .upstreamUnreachable, .handshakeFailed: return 502
        case .upstreamTimeout: return 504
        default: return 403
        }
    }
}

extension ClientConnection {
    /// Step 7 (refused): a refusal the proxy decides itself (request, destination, upstream).
    func refuse(_ reason: RefusalReason, _ detail: String) {
        sendRefusal(reason: reason, detail: detail, verdict: nil)
    }

    /// Step 7 (refused): a refusal the verdict decided.
    func refuse(verdict: Verdict) {
        guard let reason = verdict.reason else { return }
        sendRefusal(reason: reason, detail: verdict.failures.map(\.description).joined(separator: "; "), verdict: verdict)
    }

    private func sendRefusal(reason: RefusalReason, detail: String, verdict: Verdict?) {
        guard phase != .closing, phase != .relaying else { return }
        worker.shared.metrics.connection(outcome: .refused, reason: reason)
        worker.shared.metrics.refusal(hostPattern: entry.map(ProxyMetrics.patternLabel(for:)) ?? ProxyMetrics.noPatternLabel, reason: reason)
        if connectAnswered {
            // Only an upstream reopened for the client's ALPN offer is refused after the 200:
            // the client's TLS handshake is cut off, and nothing is relayed.
            logDecision(outcome: "refused", reason: reason, status: 200,
                        detail: "the upstream reopened for the client's ALPN offer was refused; the client's TLS handshake is aborted: \(detail)",
                        verdict: verdict)
            return close()
        }
        logDecision(outcome: "refused", reason: reason, status: reason.httpStatus, detail: detail, verdict: verdict)
        upstream?.close()
        upstream = nil
        teardownPhase()
        phase = .closing
        if config.proxy.refusal == .inTLS, reason != .badRequest, let (host, port) = target {
            return refuseInTLS(host: host, port: port, reason: reason, detail: detail, verdict: verdict)
        }
        let subject = target.map { "\($0.0):\($0.1)" } ?? "the request"
        let body = "pinproxy refused \(subject): \(reason.rawValue)\n\(detail)\n"
        let status = reason.httpStatus
        let statusLine = RefusalResponse.statusLine(status: status, reason: reason, host: target?.0.description)
        let head = "\(statusLine)\r\nPinproxy-Refusal: \(reason.rawValue)\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n"
        clientSide.setReading(false)
        clientSide.discardInput()
        clientSide.write(Array((head + body).utf8))
        closeWhenFlushed()
    }

    /// Step 7 (allowed): the 200 that opens the tunnel. A connection that is not a plain allow
    /// says so: `Pinproxy-Verdict: insecure` (allow-insecure) and `Pinproxy-Verdict: would-refuse
    /// <reason>` (report-only).
    func sendConnectionEstablished(verdict: Verdict) {
        connectAnswered = true
        var head = "HTTP/1.1 200 Connection established\r\n"
        if verdict.entry.policy.action == .allowInsecure { head += "Pinproxy-Verdict: insecure\r\n" }
        if case .reportOnly(let reason) = verdict.outcome { head += "Pinproxy-Verdict: would-refuse \(reason.rawValue)\r\n" }
        clientSide.write(Array((head + "\r\n").utf8))
    }

    /// Closes once everything queued for the client has been sent (or after a grace period).
    func closeWhenFlushed() {
        clientSide.setWriteLowWatermark(0)
        clientSide.onWrite = { [weak self] in
            guard let self, self.clientSide.outputLength == 0 else { return }
            self.close()
        }
        clientSide.onEvent = { [weak self] _ in self?.close() }
        phaseTimer = Timer(loop: worker.loop, after: 5) { [weak self] in self?.close() }
        if clientSide.outputLength == 0 { close() }
    }

    /// The one log line for this connection's decision.
    func logDecision(outcome: String, reason: RefusalReason?, status: Int, detail: String, verdict: Verdict?) {
        var fields: [(AccessLog.Field, String)] = [(.client, client?.description ?? "-")]
        if let (host, port) = target {
            fields += [(.host, host.description), (.port, String(port))]
        }
        if let entry { fields.append((.entry, entry.name)) }
        fields.append((.outcome, outcome))
        if let reason { fields.append((.reason, reason.rawValue)) }
        fields.append((.status, String(status)))
        if verdict != nil { fields.append((.alpn, upstreamProtocol?.description ?? "-")) }
        if !detail.isEmpty { fields.append((.detail, detail)) }
        if let verdict, !verdict.presented.isEmpty {
            fields.append((.chain, verdict.presented.map { "\($0.subject) \(Pin(digest: $0.publicKeySHA256))" }.joined(separator: " | ")))
        }
        let level: Logger.Level = outcome == "allowed" ? .info : .warning
        worker.shared.log.emit(level, "connection", fields)
    }
}
