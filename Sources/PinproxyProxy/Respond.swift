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

/// Reason phrases for the statuses pinproxy sends.
func reasonPhrase(_ status: Int) -> String {
    switch status {
    case 200: return "Connection established"
    case 400: return "Bad Request"
    case 403: return "Forbidden"
    case 502: return "Bad Gateway"
    case 504: return "Gateway Timeout"
    default: return "Error"
    }
}

extension ClientConnection {
    /// Step 7 (refused): a refusal the proxy decides itself (request, destination, upstream).
    /// `destination` names the entry when the state does not hold it yet.
    func refuse(_ reason: RefusalReason, _ detail: String, for destination: Destination? = nil) {
        sendRefusal(reason: reason, detail: detail, verdict: nil, destination: destination)
    }

    /// Step 7 (refused): a refusal the verdict decided.
    func refuse(verdict: Verdict, for destination: Destination? = nil) {
        guard let reason = verdict.reason else { return unexpected("a refusal by a verdict that has no reason") }
        sendRefusal(reason: reason, detail: verdict.failures.map(\.description).joined(separator: "; "), verdict: verdict, destination: destination)
    }

    /// Logs the refusal, stops all upstream work, and sends the answer; the connection closes
    /// once it is sent (or after `refusalGrace`).
    private func sendRefusal(reason: RefusalReason, detail: String, verdict: Verdict?, destination: Destination?) {
        switch state {
        case .readingRequest, .resolving, .connecting, .upstreamHandshake:
            break
        case .clientHandshake, .relaying, .refusing, .closed:
            return unexpected("a refusal (\(reason.rawValue))")
        }
        let subject = destination.map { ($0.host, $0.port, Optional($0.entry)) } ?? logSubject
        logDecision(outcome: "refused", reason: reason, status: reason.httpStatus, detail: detail, verdict: verdict, subject: subject)
        worker.shared.metrics.connection(outcome: .refused, reason: reason)
        worker.shared.metrics.refusal(hostPattern: subject?.entry.map(ProxyMetrics.patternLabel(for:)) ?? ProxyMetrics.noPatternLabel, reason: reason)
        if case .upstreamHandshake(_, let upstream, _) = state { upstream.connection.close() }
        let grace = LoopTimer(loop: worker.loop, after: Self.refusalGrace) { [weak self] in self?.refusalGraceOver() }
        enter(.refusing(grace: grace))
        let body = "pinproxy refused \(subject.map { "\($0.host):\($0.port)" } ?? "the request"): \(reason.rawValue)\n\(detail)\n"
        let status = reason.httpStatus
        let head = "HTTP/1.1 \(status) \(reasonPhrase(status))\r\nPinproxy-Refusal: \(reason.rawValue)\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n"
        clientSide.setReading(false)
        clientSide.discardInput()
        clientSide.setWriteLowWatermark(0)
        clientSide.write(Array((head + body).utf8))
        if clientSide.outputLength == 0 { close() }
    }

    private func refusalGraceOver() {
        guard case .refusing = state else { return unexpected("the refusal timer") }
        close()
    }

    /// Step 7 (allowed): the 200 that opens the tunnel.
    func sendConnectionEstablished() {
        clientSide.write(Array("HTTP/1.1 200 Connection established\r\n\r\n".utf8))
    }

    /// The one log line for this connection's decision.
    /// `client-gone` has no status: nothing was sent.
    func logDecision(outcome: String, reason: RefusalReason?, status: Int?, detail: String, verdict: Verdict?,
                     subject: (host: TargetHost, port: UInt16, entry: PolicyEntry?)? = nil) {
        var fields: [(AccessLog.Field, String)] = [(.client, client?.description ?? "-")]
        if let subject = subject ?? logSubject {
            fields += [(.host, subject.host.description), (.port, String(subject.port))]
            if let entry = subject.entry { fields.append((.entry, entry.name)) }
        }
        fields.append((.outcome, outcome))
        if let reason { fields.append((.reason, reason.rawValue)) }
        if let status { fields.append((.status, String(status))) }
        if !detail.isEmpty { fields.append((.detail, detail)) }
        if let verdict, !verdict.presented.isEmpty {
            fields.append((.chain, verdict.presented.map { "\($0.subject) \(Pin(digest: $0.publicKeySHA256))" }.joined(separator: " | ")))
        }
        let level: Logger.Level = outcome == "allowed" || outcome == "client-gone" ? .info : .warning
        worker.shared.log.emit(level, "connection", fields)
    }
}
