import Foundation
import Logging
import PinproxyInterop
import PinproxyPolicy
import PinproxyService

extension ClientConnection {
    /// Step 7 (refused): a refusal the proxy decides itself (request, destination, upstream).
    /// `destination` names the entry when the state does not hold it yet; `proxyError`
    /// overrides the reason's `Proxy-Status` error type.
    func refuse(_ reason: RefusalReason, _ detail: String, for destination: Destination? = nil, proxyError: ProxyStatusError? = nil) {
        sendRefusal(reason: reason, detail: detail, verdict: nil, alpn: nil, subject: destination.map(\.subject), proxyError: proxyError,
                    client: destination?.client)
    }

    /// Step 7 (refused): a refusal about `subject`, which the state does not hold (a
    /// transparent client refused before its destination is settled).
    func refuse(_ reason: RefusalReason, _ detail: String, subject: Subject) {
        sendRefusal(reason: reason, detail: detail, verdict: nil, alpn: nil, subject: subject, proxyError: nil)
    }

    /// Step 7 (refused): a refusal the verdict decided; `alpn` is what the refused upstream
    /// negotiated.
    func refuse(verdict: Verdict, alpn: ALPNProtocol? = nil, for destination: Destination? = nil) {
        guard let reason = verdict.reason else { return unexpected("a refusal by a verdict that has no reason") }
        sendRefusal(reason: reason, detail: verdict.failures.map(\.description).joined(separator: "; "), verdict: verdict,
                    alpn: alpn, subject: destination.map(\.subject), proxyError: nil, client: destination?.client)
    }

    /// Logs the refusal, stops all upstream work, and sends the answer; the connection closes
    /// once it is sent (or after `refusalGrace`). Under `refusal = "in-tls"`, and always on the
    /// transparent listener (where no CONNECT waits for an answer), the answer is a page inside
    /// the client's TLS (`refuseInTLS`); a transparent client refused for a bad request is
    /// only closed. An upstream reopened for the client's ALPN offer is refused after the 200:
    /// the client's handshake is cut off.
    private func sendRefusal(reason: RefusalReason, detail: String, verdict: Verdict?, alpn: ALPNProtocol?, subject given: Subject?,
                             proxyError: ProxyStatusError?, client givenClient: ClientDecision? = nil) {
        switch state {
        case .readingRequest, .readingTransparentHello, .identifying, .resolving, .bindingTunnel, .opening, .openingTransparent:
            break
        case .reopening(_, let reopen, _):
            return refuseReopened(reason: reason, detail: detail, verdict: verdict, alpn: alpn, after: reopen.first)
        case .readingClientHello, .clientHandshake, .handingOver, .relaying, .refusing, .refusingInTLS, .readingTunnelHello, .passingThrough, .closed:
            return unexpected("a refusal (\(reason.rawValue))")
        }
        let subject = given ?? logSubject
        let client = givenClient ?? clientDecision
        let label = client?.metricLabel ?? ProxyMetrics.noClientLabel
        logDecision(outcome: .refused, reason: reason, status: reason.traits.httpStatus, detail: detail, verdict: verdict, alpn: alpn,
                    subject: subject, client: client)
        shared.metrics.connection(outcome: .refused, reason: reason, listener: listener, client: label)
        shared.metrics.refusal(hostPattern: subject?.entry.map(ProxyMetrics.patternLabel(for:)) ?? ProxyMetrics.noPatternLabel, reason: reason,
                                      client: label)
        if let verdict, let subject { report(verdict, host: subject.host, port: subject.port, client: client) }
        dialing?.1.upstream?.connection.close()
        let proxyStatus = ProxyStatus.value(reason: reason, detail: detail, error: proxyError)
        // On the transparent listener there is no CONNECT to answer. A tunnel entry's client checks
        // its own server: a page behind pinproxy's leaf is no use to it, the CONNECT answer is.
        let inTLS = listener == .transparent || (config.proxy.refusal == .inTLS && subject?.entry?.policy.mode != .tunnel)
        if inTLS, reason != .badRequest, let subject {
            return refuseInTLS(subject, reason: reason, detail: detail, proxyStatus: proxyStatus, verdict: verdict)
        }
        if listener == .transparent { return close() }
        let grace = io.timer(after: Self.refusalGrace, repeats: false) { [weak self] in self?.refusalGraceOver() }
        enter(.refusing(grace: grace))
        let answer = RefusalResponse.connectResponse(status: reason.traits.httpStatus, reason: reason, proxyStatus: proxyStatus,
                                                     target: subject.map { ($0.host.description, $0.port) }, detail: detail)
        clientSide.setReading(false)
        clientSide.discardInput()
        clientSide.setWriteLowWatermark(0)
        clientSide.write(answer)
        if clientSide.outputLength == 0 { close() }
    }

    /// The upstream reopened for the client's ALPN offer is refused: the CONNECT already got
    /// its 200 (for the `first` outcome), so the client's TLS handshake is cut off, and nothing
    /// is relayed. A refusal by the verdict is a verdict changed on reopen.
    private func refuseReopened(reason: RefusalReason, detail: String, verdict: Verdict?, alpn: ALPNProtocol?, after first: Verdict.Outcome) {
        if let verdict, let subject = logSubject { report(verdict, host: subject.host, port: subject.port, client: clientDecision) }
        let label = clientDecision?.metricLabel ?? ProxyMetrics.noClientLabel
        shared.metrics.connection(outcome: .refused, reason: reason, listener: listener, client: label)
        shared.metrics.refusal(hostPattern: logSubject?.entry.map(ProxyMetrics.patternLabel(for:)) ?? ProxyMetrics.noPatternLabel, reason: reason,
                                      client: label)
        // The first upstream was admitted, so a refusal by the verdict always changes it.
        let changed = verdict.flatMap { $0.outcome != first ? $0.outcome : nil }
        if changed != nil { shared.metrics.reopenVerdictChanged() }
        logDecision(outcome: .refused, reason: reason, status: 200,
                    detail: "the upstream reopened for the client's ALPN offer was refused; the client's TLS handshake is aborted: \(detail)",
                    verdict: verdict, alpn: alpn, reopenChange: changed)
        close()
    }

    /// A pin-failure report on `verdict`, carrying the client's identity when
    /// `report_client_identity` says so.
    func report(_ verdict: Verdict, host: TargetHost, port: UInt16, client: ClientDecision?) {
        shared.report(verdict, host: host, port: port, client: config.proxy.reportClientIdentity ? client?.identity : nil)
    }

    private func refusalGraceOver() {
        guard case .refusing = state else { return unexpected("the refusal timer") }
        close()
    }

    /// Step 7 (allowed): the 200 that opens the tunnel. A connection that is not a plain allow
    /// says so: `Pinproxy-Verdict: insecure` (allow-insecure) and `Pinproxy-Verdict: would-refuse
    /// <reason>` (report-only).
    func sendConnectionEstablished(verdict: Verdict) {
        var head = "HTTP/1.1 200 Connection established\r\n"
        if verdict.entry.policy.action == .allowInsecure { head += "Pinproxy-Verdict: insecure\r\n" }
        if case .reportOnly(let reason) = verdict.outcome { head += "Pinproxy-Verdict: would-refuse \(reason.rawValue)\r\n" }
        clientSide.write(Array((head + "\r\n").utf8))
    }

    /// The one log line for this connection's decision (two when the upstream was reopened).
    /// `client-gone` has no status: nothing was sent. A decision on an upstream's chain says
    /// which protocol that upstream negotiated (`alpn`, `-` for none). A transparent
    /// connection's status is the one its in-TLS refusal page carries. `capture-loop` is
    /// logged once per start: a loop must not turn into a flood of lines. `verdict` gives what the
    /// upstream presented and the path OpenSSL verified; `reopenChange` is a reopened upstream's
    /// outcome when it differs from the first upstream's, which the 200 described
    /// (`reopen_outcome`, `reopen_reason`). A local client's identity (`[clients]`) is on every
    /// line: `client_uid`, `client_user`, `client_unit`, `client_exe`, as far as each is known;
    /// a forwarded client's `client_address` and the `net:` sections that matched (`client_net`).
    func logDecision(outcome: ConnectionOutcome, reason: RefusalReason?, status: Int?, detail: String, verdict: Verdict?,
                     alpn: ALPNProtocol? = nil, subject: Subject? = nil, client decision: ClientDecision? = nil,
                     reopenChange: Verdict.Outcome? = nil) {
        if reason == .captureLoop, shared.captureLoopLogged.exchange(true, ordering: .relaxed) { return }
        var fields: [(AccessLog.Field, String)] = [(.client, client?.description ?? "-")]
        fields += Self.identityFields(decision ?? clientDecision)
        fields.append((.listener, listener.rawValue))
        if let subject = subject ?? logSubject {
            fields += [(.host, subject.host.description), (.port, String(subject.port))]
            if let entry = subject.entry { fields.append((.entry, entry.name)) }
        }
        fields.append((.outcome, outcome.rawValue))
        if let reason { fields.append((.reason, reason.rawValue)) }
        if let status { fields.append((.status, String(status))) }
        switch reopenChange {
        case .allow: fields.append((.reopenOutcome, ConnectionOutcome.allowed.rawValue))
        case .reportOnly(let reason): fields += [(.reopenOutcome, ConnectionOutcome.reportOnly.rawValue), (.reopenReason, reason.rawValue)]
        case .refuse(let reason): fields += [(.reopenOutcome, ConnectionOutcome.refused.rawValue), (.reopenReason, reason.rawValue)]
        case nil: break
        }
        if verdict != nil { fields.append((.alpn, alpn?.description ?? "-")) }
        if !detail.isEmpty { fields.append((.detail, detail)) }
        let certificates = verdict.map { AccessLog.Certificates(presented: $0.presented, verified: $0.verifiedPath) }
        let level: Logger.Level = outcome == .allowed || outcome == .clientGone ? .info : .warning
        shared.log.emit(level, "connection", fields, certificates: certificates)
    }
}
