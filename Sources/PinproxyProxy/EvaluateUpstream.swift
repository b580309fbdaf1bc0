import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import PinproxyService

extension ClientConnection {
    /// Evaluate: the verdict on what the server presented (`judge`), once the handshake is done.
    /// It runs on resumed sessions too, on the chain stored with the session: resumption
    /// saves the handshake, never a check. It runs again on an upstream reopened for the
    /// client's ALPN offer, which then goes on to the client's handshake.
    func evaluateUpstream(_ upstream: Upstream, for destination: Destination) {
        let connection = upstream.connection
        io.metrics.handshakeLatency(io.now - upstream.started)
        // Not read again until the relay starts: what it sends meanwhile waits in the kernel.
        connection.setReading(false)
        let verdict = judge(upstream, for: destination)
        guard verdict.allowsConnection else {
            if connection.sessionReused { io.forgetSession(sessionKey(for: destination)) }
            return refuse(verdict: verdict, alpn: connection.selectedProtocol, note: clientCertificateNote(upstream))
        }
        if TrustEvaluator.needsCustomCheck(verdict), let command = destination.entry.policy.verifyCommand {
            return runCustomCheck(command, verdict: verdict, upstream: upstream, for: destination)
        }
        admit(verdict, upstream: upstream, for: destination)
    }

    /// The verdict on the server of `upstream`, by the same function as `evaluate`, computed once
    /// per upstream handshake: when the server asks for the entry's client certificate
    /// (`serverAskedForClientCertificate`, kept in `Upstream.judged`), else when the handshake is
    /// done. Every check on what the server presented joins the verdict here, so that the
    /// certificate goes only where the whole verdict passed, and the connection goes on with
    /// that same verdict.
    func judge(_ upstream: Upstream, for destination: Destination) -> Verdict {
        if let judged = upstream.judged { return judged }
        let connection = upstream.connection
        let presentation = presentation(of: connection, for: destination)
        let started = io.now
        let verdict = TrustEvaluator.evaluate(presentation, host: destination.host, port: destination.port, entry: destination.entry,
                                              context: destination.context, at: io.wallClock)
        io.metrics.verificationLatency(io.now - started)
        io.metrics.upstreamChainVerified(verdict.verified, entry: destination.entry)
        if !connection.sessionReused, let ct = verdict.certificateTransparency {
            for entry in ct.entries { io.metrics.sctFound(source: entry.sct.source.rawValue, counted: entry.counted) }
        }
        return verdict
    }

    /// Upstream TLS, inside the handshake: the server asked for the entry's client
    /// certificate, after its whole flight (its certificate, and in TLS 1.2 its staple) and
    /// before pinproxy's Certificate message. The server is judged now, and the certificate
    /// presented only if the verdict releases it (`Verdict.releasesClientCertificate`); else
    /// withheld, and the handshake ends here when the verdict refuses. The verdict stays with
    /// the upstream; what it decides happens when the handshake ends (`upstreamEvent`), since
    /// this runs inside OpenSSL.
    func serverAskedForClientCertificate() -> ClientCertificateAnswer {
        guard let (destination, step) = dialing, case .handshaking(var upstream, let timer) = step else { return .abortHandshake }
        let verdict = judge(upstream, for: destination)
        upstream.judged = verdict
        advance(.handshaking(upstream, timer: timer))
        if verdict.releasesClientCertificate { return .present }
        return verdict.allowsConnection ? .withhold : .abortHandshake
    }

    /// What a decision line says of a client certificate the server asked for and did not get.
    func clientCertificateNote(_ upstream: Upstream) -> String? {
        upstream.withheldClientCertificate ? "client certificate withheld: the server asked for it and did not pass the verdict" : nil
    }

    /// What the server presented. Under `ct`, a resumed session's SCT extension and staple are
    /// those its full handshake delivered (kept with the session's key): the CT judgement is
    /// then the same whether or not the answer kept with the chain is still there.
    private func presentation(of connection: IO.Endpoint, for destination: Destination) -> TrustEvaluator.Presentation {
        let chain = connection.peerCertificateChain
        guard destination.entry.policy.ct != .off else { return .init(chain: chain, ocspStaple: connection.ocspStaple) }
        let key = sessionKey(for: destination)
        guard connection.sessionReused else {
            let delivered = DeliveredBesideChain(tlsExtensionSCTs: connection.tlsExtensionSCTs, ocspStaple: connection.ocspStaple)
            io.deliveredSCTs.store(delivered, for: key)
            return .init(chain: chain, ocspStaple: delivered.ocspStaple, tlsExtensionSCTs: delivered.tlsExtensionSCTs)
        }
        guard let kept = io.deliveredSCTs.value(for: key) else {
            return .init(chain: chain, ocspStaple: connection.ocspStaple, resumed: true)
        }
        return .init(chain: chain, ocspStaple: connection.ocspStaple ?? kept.ocspStaple, tlsExtensionSCTs: kept.tlsExtensionSCTs)
    }

    /// The verdict admits the upstream: its session may be resumed, and the client's side goes
    /// on (for a CONNECT, a transparent client, or after a reopen). A report-only client-denied
    /// joins the verdict here, after every other check.
    private func admit(_ verdict: Verdict, upstream: Upstream, for destination: Destination) {
        upstream.connection.admitSession()
        let verdict = TrustEvaluator.adding(destination.client, to: verdict)
        let tunnel = Tunnel(destination: destination, upstream: upstream, outcome: verdict.outcome)
        switch state {
        case .opening: intercept(tunnel, verdict: verdict)
        case .openingTransparent: interceptTransparent(tunnel, verdict: verdict)
        case .reopening(_, let reopen, _): admitReopened(tunnel, verdict: verdict, for: reopen.hello, after: reopen.first)
        case .readingRequest, .readingTransparentHello, .identifying, .resolving, .bindingTunnel, .readingClientHello, .clientHandshake,
             .handingOver, .relaying, .refusing, .refusingInTLS, .readingTunnelHello, .passingThrough, .closed:
            upstream.connection.close()
            unexpected("an admitted upstream")
        }
    }

    /// Evaluate, then: the entry's `verify_command` on the verified chain, off the loop. Its answer
    /// can only refuse more; until it comes, the client is watched as during the handshake.
    private func runCustomCheck(_ command: [String], verdict: Verdict, upstream: Upstream, for destination: Destination) {
        let settings = config.proxy
        let patience = settings.verifyCommandTimeout + settings.handshakeTimeout
        let timer = io.timer(after: patience, repeats: false) { [weak self] in self?.customCheckTimedOut() }
        advance(.checkingCommand(upstream, verdict, timer: timer))
        io.runCustomCheck(command, entry: destination.entry, chain: verdict.verified, host: destination.host, port: destination.port,
                          client: destination.client.identity, timeout: settings.verifyCommandTimeout,
                          cacheSeconds: settings.verifyCommandCache) { [weak self] result in self?.customCheckAnswered(result) }
    }

    private func customCheckAnswered(_ result: CustomCheckResult) {
        guard let (destination, step) = dialing, case .checkingCommand(let upstream, let builtIn, _) = step else {
            // The connection moved on meanwhile (the client left, or the check's time ran out): nothing waits for it.
            return
        }
        let verdict = TrustEvaluator.adding(result, to: builtIn)
        guard verdict.allowsConnection else { return refuse(verdict: verdict, alpn: upstream.connection.selectedProtocol) }
        admit(verdict, upstream: upstream, for: destination)
    }

    private func customCheckTimedOut() {
        guard let (destination, step) = dialing, case .checkingCommand(let upstream, let builtIn, _) = step else {
            return unexpected("the verify_command timer")
        }
        let late = CustomCheckResult(passed: false, detail: "verify_command timed out: did not answer within \(formatSeconds(config.proxy.verifyCommandTimeout + config.proxy.handshakeTimeout)) (waiting for a free slot included)")
        let verdict = TrustEvaluator.adding(late, to: builtIn)
        guard verdict.allowsConnection else { return refuse(verdict: verdict, alpn: upstream.connection.selectedProtocol) }
        admit(verdict, upstream: upstream, for: destination)
    }
}
