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
        let verdict = TrustEvaluator.evaluate(presentation, host: destination.host, port: destination.port, entry: destination.entry, at: Date())
        worker.shared.metrics.verificationLatency(Date().timeIntervalSince(started))
        guard verdict.allowsConnection else {
            if connection.sessionReused { worker.shared.sessions.remove(sessionKey(for: destination)) }
            return refuse(verdict: verdict, alpn: connection.selectedProtocol)
        }
        connection.admitSession()
        let tunnel = Tunnel(destination: destination, upstream: upstream, verdict: verdict)
        switch opening {
        case .first: intercept(tunnel)
        case .reopen(let hello): admitReopened(tunnel, for: hello)
        }
    }
}
