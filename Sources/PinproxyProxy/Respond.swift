import FoundationEssentials
import Logging
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import PinproxyService

extension ClientConnection {
    /// Respond (refused): a refusal the proxy decides itself (request, destination, upstream).
    /// `destination` names the entry when the state does not hold it yet; `proxyError`
    /// overrides the reason's `Proxy-Status` error type.
    func refuse(_ reason: RefusalReason, _ detail: String, for destination: Destination? = nil, proxyError: ProxyStatusError? = nil) {
        sendRefusal(reason: reason, detail: detail, verdict: nil, alpn: nil, subject: destination.map(\.subject), proxyError: proxyError,
                    client: destination?.client)
    }

    /// Respond (refused): a refusal about `subject`, which the state does not hold (a
    /// transparent client refused before its destination is settled).
    func refuse(_ reason: RefusalReason, _ detail: String, subject: Subject) {
        sendRefusal(reason: reason, detail: detail, verdict: nil, alpn: nil, subject: subject, proxyError: nil)
    }

    /// Respond (refused): a refusal the verdict decided; `alpn` is what the refused upstream
    /// negotiated, `note` what the detail adds after the failures.
    func refuse(verdict: Verdict, alpn: ALPNProtocol? = nil, for destination: Destination? = nil, note: String? = nil) {
        guard let reason = verdict.reason else { return unexpected("a refusal by a verdict that has no reason") }
        let detail = (verdict.failures.map(\.description) + [note].compactMap { $0 }).joined(separator: "; ")
        sendRefusal(reason: reason, detail: detail, verdict: verdict,
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
        record(.init(outcome: .refused, reason: reason, status: reason.traits.httpStatus, detail: detail, verdict: verdict, alpn: alpn),
               subject: subject, client: givenClient)
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
        // The first upstream was admitted, so a refusal by the verdict always changes it.
        let changed = verdict.flatMap { $0.outcome != first ? $0.outcome : nil }
        record(.init(outcome: .refused, reason: reason, status: 200,
                     detail: "the upstream reopened for the client's ALPN offer was refused; the client's TLS handshake is aborted: \(detail)",
                     verdict: verdict, alpn: alpn, reopen: .reopened(changed: changed)))
        close()
    }

    private func refusalGraceOver() {
        guard case .refusing = state else { return unexpected("the refusal timer") }
        close()
    }

    /// Respond (allowed): the 200 that opens the tunnel. A connection that is not a plain allow
    /// says so: `Pinproxy-Verdict: insecure` (allow-insecure) and `Pinproxy-Verdict: would-refuse
    /// <reason>` (report-only).
    func sendConnectionEstablished(verdict: Verdict) {
        var head = "HTTP/1.1 200 Connection established\r\n"
        if verdict.entry.policy.action == .allowInsecure { head += "Pinproxy-Verdict: insecure\r\n" }
        if case .reportOnly(let reason) = verdict.outcome { head += "Pinproxy-Verdict: would-refuse \(reason.rawValue)\r\n" }
        clientSide.write(Array((head + "\r\n").utf8))
    }
}
