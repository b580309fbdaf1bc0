import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import Logging

extension ClientConnection {
    /// Upstream TLS: the upstream TLS handshake within `handshake_timeout`: SNI = host (none for IP
    /// literals), ALPN `offer` (h2, http/1.1; the client's own offer for a transparent client or
    /// when reopened for it), the entry's minimum version, a staple request under `revocation = "ocsp-staple"`, the
    /// SCT extension and a staple request under `ct` other than `"off"`, and
    /// the entry's `client_certificate` for a server that asks for one and passes the verdict
    /// (`serverAskedForClientCertificate`). Renegotiation is refused (see `upstreamRenegotiationAttempted`).
    func startUpstreamTLS(socket: Int32, address: SocketAddress, for destination: Destination, own: OwnUpstreams.Registration?) {
        let entry = destination.entry
        let offer: ALPNOffer
        switch state {
        case .opening: offer = ALPNOffer.upstreamDefault
        case .openingTransparent(_, let hello, _): offer = ALPNAgreement.reopenOffer(for: hello.alpn)
        case .reopening(_, let reopen, _): offer = ALPNAgreement.reopenOffer(for: reopen.hello.alpn)
        case .readingRequest, .readingTransparentHello, .identifying, .resolving, .bindingTunnel, .readingClientHello, .clientHandshake,
             .handingOver, .relaying, .refusing, .refusingInTLS, .readingTunnelHello, .passingThrough, .closed:
            io.closeSocket(socket)
            return unexpected("an upstream TLS handshake to start")
        }
        let connection: IO.Endpoint
        do {
            let requestStaple: Bool = if case .ocspStaple = entry.policy.revocation { true } else { false }
            // SCTs come with the certificate, in the TLS extension or in a staple. A resumed
            // session brings none again: its CT judgement is the one kept with the chain.
            connection = try io.connectTLS(socket: socket, serverName: destination.host.serverName,
                                           minimumVersion: entry.policy.minTLS == .v1_3 ? .tls13 : .tls12,
                                           requestOCSPStaple: requestStaple, requestSCTs: entry.policy.ct != .off, alpn: offer, clientIdentity: entry.policy.clientIdentity,
                                           sessionKey: requestStaple ? nil : sessionKey(for: destination))
        } catch {
            return refuse(.handshakeFailed, "cannot start TLS: \(error)")
        }
        connection.onEvent = { [weak self] events in self?.upstreamEvent(events) }
        connection.onRenegotiationAttempt = { [weak self] in self?.upstreamRenegotiationAttempted() }
        connection.onClientCertificateRequest = { [weak self] in self?.serverAskedForClientCertificate() ?? .abortHandshake }
        let timer = io.timer(after: config.proxy.handshakeTimeout, repeats: false) { [weak self] in self?.upstreamHandshakeTimedOut() }
        let upstream = Upstream(connection: connection, address: address, offer: offer, started: io.now, own: own)
        advance(.handshaking(upstream, timer: timer))
    }

    /// Events on the upstream until the relay takes it over.
    private func upstreamEvent(_ events: BufferEvent.Events) {
        switch state {
        case .opening(let destination, .handshaking(let upstream, _)), .openingTransparent(let destination, _, .handshaking(let upstream, _)),
             .reopening(let destination, _, .handshaking(let upstream, _)):
            if events.contains(.connected) {
                return evaluateUpstream(upstream, for: destination)
            }
            let failure = upstream.connection.takeTLSErrors()
            if let verdict = upstream.judged, !verdict.releasesClientCertificate {
                // Judged when the server asked for the client certificate, which it did not get.
                guard verdict.allowsConnection else { return refuse(verdict: verdict, note: clientCertificateNote(upstream)) }
                let failures = verdict.failures.map(\.description).joined(separator: "; ")
                return refuse(.handshakeFailed, "the TLS handshake with \(describe(upstream, for: destination)) failed without the client certificate, withheld because the server would be refused (\(failures)): \(failure)")
            }
            if upstream.own?.captured == true {
                return refuse(.captureLoop, "pinproxy's own connection to \(describe(upstream, for: destination)) was captured by the egress lock and came back to its transparent listener: run pinproxy as a user of [capture] exempt_users (then `pinproxy egress apply`)")
            }
            if failure.isProtocolVersionMismatch {
                return refuse(.tlsVersion, "\(describe(upstream, for: destination)) offers no TLS version at or above \(destination.entry.policy.minTLS.rawValue): \(failure)")
            }
            refuse(.handshakeFailed, "the TLS handshake with \(describe(upstream, for: destination)) failed: \(failure)")
        case .opening(let destination, .checkingCommand(let upstream, _, _)), .openingTransparent(let destination, _, .checkingCommand(let upstream, _, _)),
             .reopening(let destination, _, .checkingCommand(let upstream, _, _)):
            // The upstream is not read until the relay starts, so only an error can come here.
            logEvent(.warning, "upstream-closed", detail: "\(describe(upstream, for: destination)) closed while its verify_command ran")
            close()
        case .readingClientHello(let tunnel, _, _), .clientHandshake(let tunnel, _), .handingOver(let tunnel, _):
            // The upstream is not read until the relay starts, so only an error can come here.
            logEvent(.warning, "upstream-closed", detail: "\(describe(tunnel.upstream, for: tunnel.destination)) closed before the client finished its TLS handshake")
            close()
        case .readingRequest, .readingTransparentHello, .identifying, .resolving, .bindingTunnel, .opening(_, .connecting),
             .openingTransparent(_, _, .connecting), .reopening(_, _, .connecting), .relaying, .refusing, .refusingInTLS, .readingTunnelHello,
             .passingThrough, .closed:
            unexpected("an upstream event (\(events.rawValue))")
        }
    }

    private func upstreamHandshakeTimedOut() {
        guard let (destination, step) = dialing, case .handshaking(let upstream, _) = step else { return unexpected("the upstream handshake timer") }
        refuse(.upstreamTimeout, "the TLS handshake with \(describe(upstream, for: destination)) did not finish within \(formatSeconds(config.proxy.handshakeTimeout))")
    }

    /// The upstream asked for a second handshake, which could present a certificate the
    /// verdict never saw. OpenSSL refused it; the tunnel is closed, and no byte the upstream
    /// sent after the request is relayed (see `pump`).
    func upstreamRenegotiationAttempted() {
        let why = "the upstream asked to renegotiate TLS after the verdict (refused: a second handshake could present a certificate the verdict never saw)"
        switch state {
        case .opening(_, .handshaking), .opening(_, .checkingCommand), .openingTransparent(_, _, .handshaking),
             .openingTransparent(_, _, .checkingCommand), .reopening(_, _, .handshaking), .reopening(_, _, .checkingCommand):
            refuse(.handshakeFailed, why)
        case .readingClientHello(let tunnel, _, _), .clientHandshake(let tunnel, _), .handingOver(let tunnel, _), .relaying(let tunnel, _, _):
            logEvent(.warning, "renegotiation-refused", detail: "\(describe(tunnel.upstream, for: tunnel.destination)): \(why): tunnel closed")
            tunnel.closeReason = "upstream renegotiation refused"
            close()
        case .readingRequest, .readingTransparentHello, .identifying, .resolving, .bindingTunnel, .opening(_, .connecting),
             .openingTransparent(_, _, .connecting), .reopening(_, _, .connecting), .refusing, .refusingInTLS, .readingTunnelHello, .passingThrough, .closed:
            unexpected("an upstream renegotiation request")
        }
    }

    /// The resumption cache key: the entry's policy fingerprint, host and port, so a session
    /// is only resumed under the policy that admitted it. (Staples are not resumed, so
    /// `ocsp-staple` entries never use the cache.)
    func sessionKey(for destination: Destination) -> String {
        "\(destination.entry.fingerprint)|\(destination.host)|\(destination.port)"
    }

    func describe(_ upstream: Upstream, for destination: Destination) -> String {
        "\(destination) (\(upstream.address))"
    }
}
