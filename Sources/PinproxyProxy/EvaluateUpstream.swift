import Foundation
import PinproxyInterop
import PinproxyPolicy

extension ClientConnection {
    /// Step 6: the verdict on what the server presented, by the same function as `evaluate`.
    /// It runs on resumed sessions too, on the chain stored with the session: resumption
    /// saves the handshake, never a check. It runs again on an upstream reopened for the
    /// client's ALPN offer, which then goes on to the client's handshake.
    func evaluateUpstream(_ upstream: Upstream, for destination: Destination, opening: Opening) {
        let connection = upstream.connection
        worker.shared.metrics.handshakeLatency(Date().timeIntervalSince(upstream.started))
        // Not read again until the relay starts: what it sends meanwhile waits in the kernel.
        connection.setReading(false)
        let presentation = TrustEvaluator.Presentation(chain: connection.peerCertificateChain, ocspStaple: connection.ocspStaple)
        let started = Date()
        let verdict = TrustEvaluator.evaluate(presentation, host: destination.host, port: destination.port, entry: destination.entry,
                                              context: destination.context, at: Date())
        worker.shared.metrics.verificationLatency(Date().timeIntervalSince(started))
        worker.shared.metrics.upstreamChainVerified(verdict.verified, entry: destination.entry)
        guard verdict.allowsConnection else {
            if connection.sessionReused { worker.shared.sessions.remove(sessionKey(for: destination)) }
            return refuse(verdict: verdict, alpn: connection.selectedProtocol)
        }
        if TrustEvaluator.needsCustomCheck(verdict), let command = destination.entry.policy.verifyCommand {
            return runCustomCheck(command, verdict: verdict, upstream: upstream, for: destination, opening: opening)
        }
        admit(verdict, upstream: upstream, for: destination, opening: opening)
    }

    /// The verdict admits the upstream: its session may be resumed, and the client's side goes
    /// on. A report-only client-denied joins the verdict here, after every other check.
    private func admit(_ verdict: Verdict, upstream: Upstream, for destination: Destination, opening: Opening) {
        upstream.connection.admitSession()
        let tunnel = Tunnel(destination: destination, upstream: upstream, verdict: TrustEvaluator.adding(destination.client, to: verdict))
        switch opening {
        case .first: intercept(tunnel)
        case .reopen(let hello, let first): admitReopened(tunnel, for: hello, after: first)
        case .transparent: interceptTransparent(tunnel)
        }
    }

    /// Step 6b: the entry's `verify_command` on the verified chain, off the loop. Its answer
    /// can only refuse more; until it comes, the client is watched as during the handshake.
    private func runCustomCheck(_ command: [String], verdict: Verdict, upstream: Upstream, for destination: Destination, opening: Opening) {
        let settings = config.proxy
        let patience = settings.verifyCommandTimeout + settings.handshakeTimeout
        let timer = LoopTimer(loop: worker.loop, after: patience) { [weak self] in self?.customCheckTimedOut() }
        enter(.checkingCommand(destination, upstream, verdict, timer: timer, opening))
        worker.shared.customChecks.check(command, entry: destination.entry, chain: verdict.verified, host: destination.host, port: destination.port,
                                         client: destination.client.identity, timeout: settings.verifyCommandTimeout,
                                         cacheSeconds: settings.verifyCommandCache,
                                         on: worker.loop) { [weak self] result in self?.customCheckAnswered(result) }
    }

    private func customCheckAnswered(_ result: CustomCheckResult) {
        guard case .checkingCommand(let destination, let upstream, let builtIn, _, let opening) = state else {
            // The connection was closed meanwhile (the client left, say): nothing waits for it.
            return
        }
        let verdict = TrustEvaluator.adding(result, to: builtIn)
        guard verdict.allowsConnection else { return refuse(verdict: verdict, alpn: upstream.connection.selectedProtocol) }
        admit(verdict, upstream: upstream, for: destination, opening: opening)
    }

    private func customCheckTimedOut() {
        guard case .checkingCommand(_, let upstream, let builtIn, _, _) = state else { return unexpected("the verify_command timer") }
        let late = CustomCheckResult(passed: false, detail: "verify_command timed out: did not answer within \(formatSeconds(config.proxy.verifyCommandTimeout + config.proxy.handshakeTimeout)) (waiting for a free slot included)")
        let verdict = TrustEvaluator.adding(late, to: builtIn)
        guard verdict.allowsConnection else { return refuse(verdict: verdict, alpn: upstream.connection.selectedProtocol) }
        guard case .checkingCommand(let destination, _, _, _, let opening) = state else { return }
        admit(verdict, upstream: upstream, for: destination, opening: opening)
    }
}
