import Foundation
import PinproxyInterop
import PinproxyPolicy

extension ClientConnection {
    /// Step 6: the verdict on what the server presented, by the same function as `evaluate`.
    /// It runs on resumed sessions too, on the chain stored with the session: resumption
    /// saves the handshake, never a check. It runs again on an upstream reopened for the
    /// client's ALPN offer, which then goes on to the client's handshake.
    func evaluateUpstream() {
        guard let (host, port) = target, let entry, let upstream else { return }
        if let handshakeStarted { worker.shared.metrics.handshakeLatency(Date().timeIntervalSince(handshakeStarted)) }
        let presentation = TrustEvaluator.Presentation(chain: upstream.peerCertificateChain, ocspStaple: upstream.ocspStaple)
        let started = Date()
        let verdict = TrustEvaluator.evaluate(presentation, host: host, port: port, entry: entry, at: Date())
        worker.shared.metrics.verificationLatency(Date().timeIntervalSince(started))
        upstreamProtocol = upstream.selectedProtocol
        guard verdict.allowsConnection else {
            if upstream.sessionReused, let sessionKey { worker.shared.sessions.remove(sessionKey) }
            return refuse(verdict: verdict)
        }
        resumed = upstream.sessionReused
        upstream.admitSession()
        self.verdict = verdict
        if reopenedFor != nil {
            return admitReopened()
        }
        intercept()
    }
}
