import FoundationEssentials
import PinproxyCore
import Logging
import PinproxyInterop
import PinproxyPolicy
import PinproxyService

extension ClientConnection {
    /// Respond and intercept (allowed): record the decision, answer 200, then read the client's ClientHello
    /// (`NegotiateProtocol.swift`) to settle the protocol before answering it, all within the
    /// client's `handshake_timeout`.
    func intercept(_ tunnel: Tunnel, verdict: Verdict) {
        logAdmission(tunnel, verdict: verdict, note: nil)
        sendConnectionEstablished(verdict: verdict)
        let timer = io.timer(after: config.proxy.handshakeTimeout, repeats: false) { [weak self] in self?.clientHandshakeTimedOut() }
        readClientHello(tunnel, timer: timer)
    }

    /// Respond and intercept for a transparent client: there is no CONNECT to answer, and the upstream was
    /// offered the client's own ALPN list, so the ClientHello waiting in the buffer is answered
    /// at once with what the upstream negotiated, within the client's `handshake_timeout`.
    func interceptTransparent(_ tunnel: Tunnel, verdict: Verdict) {
        logAdmission(tunnel, verdict: verdict, note: nil)
        let timer = io.timer(after: config.proxy.handshakeTimeout, repeats: false) { [weak self] in self?.clientHandshakeTimedOut() }
        acceptClientTLS(tunnel, timer: timer)
    }

    /// The decision (line, metrics, report) of an upstream `verdict` admitted; `note` says why
    /// it is not the first, and `reopenChange` how its verdict differs from the first's.
    func logAdmission(_ tunnel: Tunnel, verdict: Verdict, note: String?, reopenChange: Verdict.Outcome? = nil) {
        let outcome: ConnectionOutcome = verdict.outcome == .allow ? .allowed : .reportOnly
        let resumed = tunnel.upstream.connection.sessionReused
        // A TLS 1.3 server that requires a certificate says so only after the handshake, by closing.
        let unanswered = tunnel.upstream.connection.clientCertificateRequested && tunnel.destination.entry.policy.clientIdentity == nil
            ? ["the upstream asked for a client certificate and \(tunnel.destination.entry.name) has none to give (client_certificate): it may close the connection"]
            : []
        // An unknown (or partly known) client a [clients."unknown"] section admitted: the line says so.
        var unknown: [String] = []
        switch tunnel.destination.client.identity {
        case .some(let identity) where identity.isUnknown: unknown = ["client \(identity)"]
        case .some, nil: break
        }
        let withheld = [clientCertificateNote(tunnel.upstream)].compactMap { $0 }
        var detail = ([note].compactMap { $0 } + unknown + verdict.notes + unanswered + (resumed ? ["upstream TLS session resumed"] : [])).joined(separator: "; ")
        if case .reportOnly = verdict.outcome {
            detail = ([note].compactMap { $0 } + ["would refuse: " + verdict.failures.map(\.description).joined(separator: "; ")] + withheld).joined(separator: "; ")
        }
        record(.init(outcome: outcome, reason: verdict.reason, status: 200, detail: detail, verdict: verdict, alpn: tunnel.applicationProtocol,
                     reopen: note == nil ? .first : .reopened(changed: reopenChange)))
    }

    /// Intercept: terminate the client's TLS with a leaf for the CONNECT host minted by the local
    /// CA, selecting the protocol the upstream negotiated, within `timer` (the client's
    /// `handshake_timeout`). A client whose SNI names another host fails the handshake
    /// (unrecognized_name): not a byte is relayed.
    func acceptClientTLS(_ tunnel: Tunnel, timer: IO.Timer) {
        let host = tunnel.destination.host
        let tls: IO.Endpoint
        do {
            tls = try io.acceptTLS(on: clientSide, for: host, serverName: host.serverName, applicationProtocols: tunnel.applicationProtocol.map { [$0] } ?? [],
                                   bufferLimit: config.proxy.relayBufferBytes)
        } catch {
            logEvent(.error, "intercept-failed", detail: "cannot mint or install a certificate for \(host): \(error)")
            return close()
        }
        clientSide = tls
        tls.onEvent = { [weak self] events in self?.clientHandshakeEvent(events) }
        enter(.clientHandshake(tunnel, timer: timer))
    }

    private func clientHandshakeEvent(_ events: EndpointEvents) {
        guard case .clientHandshake(let tunnel, _) = state else { return unexpected("a client TLS event (\(events.rawValue))") }
        guard events.contains(.connected) else {
            let failure = clientSide.takeTLSErrors()
            let host = tunnel.destination.host
            if let sni = clientSide.requestedServerName, host.serverName != nil, TargetHost(sni) != host {
                logEvent(.warning, "sni-mismatch", detail: "the client's SNI \(sni) differs from the CONNECT host \(host): refused in the handshake")
            } else {
                logEvent(.warning, "client-handshake-failed", detail: "\(failure) (does the client trust the pinproxy CA? see `pinproxy ca`)")
            }
            return close()
        }
        startRelay(tunnel)
    }

    /// The client's `handshake_timeout` (from the 200, or from the reopened upstream's
    /// admission) ran out, while its ClientHello was read or during its handshake.
    func clientHandshakeTimedOut() {
        switch state {
        case .readingClientHello, .clientHandshake:
            clientHandshakeFailed("the client did not finish its TLS handshake in time")
        case .readingRequest, .readingTransparentHello, .identifying, .resolving, .bindingTunnel, .opening, .openingTransparent, .reopening,
             .handingOver, .relaying, .refusing, .refusingInTLS, .readingTunnelHello, .passingThrough, .closed:
            unexpected("the client handshake timer")
        }
    }
}
