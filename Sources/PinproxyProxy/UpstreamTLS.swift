import Foundation
import PinproxyInterop
import PinproxyPolicy

extension ClientConnection {
    /// Step 5b: the upstream TLS handshake: SNI = host (none for IP literals), ALPN http/1.1,
    /// the entry's minimum version, a staple request under `revocation = "ocsp-staple"`.
    func startUpstreamTLS(socket: Int32) {
        guard let (host, _) = target, let entry else { return closeSocket(socket) }
        phase = .upstreamHandshake
        handshakeStarted = Date()
        let upstream: BufferEvent
        do {
            let requestStaple: Bool = if case .ocspStaple = entry.policy.revocation { true } else { false }
            upstream = try BufferEvent.connectTLS(loop: worker.loop, socket: socket, context: worker.shared.upstreamTLS,
                                                  serverName: host.serverName,
                                                  minimumVersion: entry.policy.minTLS == .v1_3 ? .tls13 : .tls12,
                                                  requestOCSPStaple: requestStaple,
                                                  sessions: requestStaple ? nil : worker.shared.sessions, sessionKey: sessionKey)
        } catch {
            return refuse(.handshakeFailed, "cannot start TLS: \(error)")
        }
        self.upstream = upstream
        phaseTimer = Timer(loop: worker.loop, after: config.proxy.handshakeTimeout) { [weak self] in
            guard let self else { return }
            self.refuse(.upstreamTimeout, "the TLS handshake with \(self.describeUpstream()) did not finish within \(formatSeconds(self.config.proxy.handshakeTimeout))")
        }
        upstream.onEvent = { [weak self] events in
            guard let self, self.phase == .upstreamHandshake else { return }
            self.phaseTimer = nil
            if events.contains(.connected) {
                return self.evaluateUpstream()
            }
            let failure = upstream.takeTLSErrors()
            if failure.isProtocolVersionMismatch {
                return self.refuse(.tlsVersion, "\(self.describeUpstream()) offers no TLS version at or above \(entry.policy.minTLS.rawValue): \(failure)")
            }
            self.refuse(.handshakeFailed, "the TLS handshake with \(self.describeUpstream()) failed: \(failure)")
        }
    }

    /// The resumption cache key: the entry's policy fingerprint, host and port, so a session
    /// is only resumed under the policy that admitted it. (Staples are not resumed, so
    /// `ocsp-staple` entries never use the cache.)
    var sessionKey: String? {
        guard let (host, port) = target, let entry else { return nil }
        return "\(entry.fingerprint)|\(host)|\(port)"
    }

    func describeUpstream() -> String {
        guard let (host, port) = target else { return "upstream" }
        return upstreamAddress.map { "\(host):\(port) (\($0))" } ?? "\(host):\(port)"
    }
}
