import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import PinproxyService

extension ClientConnection {
    /// A direction of the tunnel: up is client to upstream.
    typealias Direction = TLSRelay.Direction

    /// Relay, first: the client's handshake is done (state `handingOver`). The relay takes both
    /// TLS connections out of their buffer events on the loop's next pass, outside libevent's
    /// callbacks for them.
    func startRelay(_ tunnel: Tunnel) {
        clientSide.onEvent = nil
        clientSide.setReading(false)
        let handOver = io.timer(after: 0, repeats: false) { [weak self] in self?.relay() }
        enter(.handingOver(tunnel, handOver: handOver))
    }

    /// Relay: bytes both ways between the two TLS connections (`TLSRelay`). A direction whose
    /// sink is full holds at most one read (`relay_buffer_bytes`, at most one TLS record) and
    /// stops reading until the sink has taken it. Half-close (except for `h2`): when one side
    /// stops sending, everything it sent has been delivered, and the other peer gets a TLS
    /// close_notify while the opposite direction goes on; once both have ended, both sides are
    /// closed. A tunnel with no traffic either way for `idle_timeout` is closed.
    private func relay() {
        guard case .handingOver(let tunnel, _) = state else { return unexpected("the relay's start") }
        guard let relay = io.relay(client: clientSide, upstream: tunnel.upstream.connection, readLimit: config.proxy.relayBufferBytes) else {
            return unexpected("a TLS connection that cannot be handed to the relay")
        }
        tunnel.relayStarted = io.now
        tunnel.lastActivity = io.now
        let idle = config.proxy.idleTimeout
        let idleCheck = io.timer(after: max(0.05, idle / 4), repeats: true) { [weak self] in self?.checkIdle() }
        enter(.relaying(tunnel, relay, idleCheck: idleCheck))
        io.tunnelOpened()
        relay.onEvent = { [weak self] event in self?.relayEvent(event) }
        relay.start()
    }

    private func relayEvent(_ event: TLSRelay.Event) {
        guard case .relaying(let tunnel, let relay, _) = state else { return unexpected("a relay event") }
        switch event {
        case .relayed(let direction, let bytes):
            tunnel.lastActivity = io.now
            switch direction {
            case .up:
                tunnel.bytesUp += bytes
                io.metrics.relayed(bytesUp: UInt64(bytes), bytesDown: 0)
            case .down:
                tunnel.bytesDown += bytes
                io.metrics.relayed(bytesUp: 0, bytesDown: UInt64(bytes))
            }
        case .ended(let direction):
            // Everything the side sent has been delivered: its peer is told (close_notify).
            // An HTTP/2 connection has no half-closed state (RFC 9113 §5.4.1; gRPC servers keep
            // their side open after a close_notify): an h2 tunnel closes as soon as one
            // direction has ended.
            tunnel.ended.insert(direction)
            if tunnel.closeReason.isEmpty { tunnel.closeReason = direction == .up ? "client closed" : "upstream closed" }
            if tunnel.ended.contains(direction.other) || tunnel.applicationProtocol == .h2 { return close() }
            relay.shutdownWrite(direction)
        case .writeFailed(let direction):
            // The sink cannot take what the other side sends: nothing more can be delivered.
            tunnel.closeReason = direction == .down ? "client connection error" : "upstream connection error"
            close()
        case .renegotiationAttempted:
            upstreamRenegotiationAttempted()
        }
    }

    private func checkIdle() {
        guard case .relaying(let tunnel, _, _) = state else { return unexpected("the idle timer") }
        let idle = config.proxy.idleTimeout
        guard io.now - tunnel.lastActivity >= idle else { return }
        tunnel.closeReason = "idle for \(formatSeconds(idle))"
        close()
    }
}
