import Foundation
import PinproxyInterop
import PinproxyPolicy

extension ClientConnection {
    /// Step 6: the verdict on what the server presented, by the same function as `evaluate`.
    func evaluateUpstream() {
        guard let (host, port) = target, let entry, let upstream else { return }
        handshakeSeconds = handshakeStarted.map { Date().timeIntervalSince($0) }
        let presentation = TrustEvaluator.Presentation(chain: upstream.peerCertificateChain, ocspStaple: upstream.ocspStaple)
        let started = Date()
        let verdict = TrustEvaluator.evaluate(presentation, host: host, port: port, entry: entry, at: Date())
        verificationSeconds = Date().timeIntervalSince(started)
        guard verdict.allowsConnection else {
            return refuse(verdict: verdict)
        }
        self.verdict = verdict
        intercept()
    }
}
