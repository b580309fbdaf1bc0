import Foundation
import PinproxyInterop

extension ClientConnection {
    /// Step 9: bytes both ways between the two TLS sessions. Each direction buffers at most
    /// `relay_buffer_bytes` before its reader pauses (resumed when the writer drains to half).
    /// Half-close (except for `h2`, see `finish`): when one side stops sending, what it sent is
    /// delivered, then the other peer gets a TLS close_notify while the opposite direction goes
    /// on; once both have ended, both sides are closed. A tunnel with no traffic either way for `idle_timeout` is closed.
    func relay(_ tunnel: Tunnel) {
        let upstream = tunnel.upstream.connection
        tunnel.relayStarted = Date()
        tunnel.lastActivity = worker.loop.now
        let idle = config.proxy.idleTimeout
        let idleCheck = LoopTimer(loop: worker.loop, after: max(0.05, idle / 4), repeats: true) { [weak self] in self?.checkIdle() }
        enter(.relaying(tunnel, idleCheck: idleCheck))
        worker.shared.tunnelOpened()
        for direction in [Direction.up, .down] {
            let (source, sink) = ends(of: direction, in: tunnel)
            sink.setWriteLowWatermark(config.proxy.relayBufferBytes / 2)
            source.onRead = { [weak self] in self?.relayEvent(.readable(direction)) }
            sink.onWrite = { [weak self] in self?.relayEvent(.drained(direction)) }
            source.onEvent = { [weak self] events in self?.relayEvent(.ended(direction, events)) }
        }
        clientSide.setReading(true)
        upstream.setReading(true)
        // Bytes that arrived before the tunnel opened (early data, a server banner).
        pump(.up, in: tunnel)
        pump(.down, in: tunnel)
    }

    /// A direction of the tunnel: up is client to upstream.
    enum Direction {
        case up, down

        var other: Direction { self == .up ? .down : .up }
    }

    /// What the relay reacts to.
    private enum RelayEvent {
        /// The direction's source has bytes.
        case readable(Direction)
        /// The direction's sink has drained to its low watermark.
        case drained(Direction)
        /// The direction's source stopped sending (EOF, error, timeout).
        case ended(Direction, BufferEvent.Events)
    }

    /// The source and the sink of a direction.
    private func ends(of direction: Direction, in tunnel: Tunnel) -> (source: BufferEvent, sink: BufferEvent) {
        direction == .up ? (clientSide, tunnel.upstream.connection) : (tunnel.upstream.connection, clientSide)
    }

    private func relayEvent(_ event: RelayEvent) {
        guard case .relaying(let tunnel, _) = state else { return unexpected("a relay event") }
        switch event {
        case .readable(let direction):
            pump(direction, in: tunnel)
        case .drained(let direction):
            let (source, sink) = ends(of: direction, in: tunnel)
            if tunnel.ended.contains(direction) {
                if sink.outputLength == 0 { finish(direction, in: tunnel) }
            } else if !source.isReading && !source.isClosed {
                source.setReading(true)
            }
        case .ended(let direction, let events):
            if direction == .down && tunnel.upstream.connection.renegotiationAttempted {
                // The upstream gave up after its renegotiation request was refused.
                return upstreamRenegotiationAttempted()
            }
            if events.contains(.error) && events.contains(.writing) {
                // This side cannot take what the other sends: nothing more can be delivered.
                tunnel.closeReason = direction == .up ? "client connection error" : "upstream connection error"
                return close()
            }
            // The side stopped sending (cleanly or not): deliver what it sent first.
            let (source, sink) = ends(of: direction, in: tunnel)
            pump(direction, in: tunnel)
            guard case .relaying = state else { return }  // the pump closed the tunnel
            source.setReading(false)
            tunnel.ended.insert(direction)
            if tunnel.closeReason.isEmpty { tunnel.closeReason = direction == .up ? "client closed" : "upstream closed" }
            sink.setWriteLowWatermark(0)
            if sink.outputLength == 0 { finish(direction, in: tunnel) }
        }
    }

    private func checkIdle() {
        guard case .relaying(let tunnel, _) = state else { return unexpected("the idle timer") }
        let idle = config.proxy.idleTimeout
        guard worker.loop.now - tunnel.lastActivity >= idle else { return }
        tunnel.closeReason = "idle for \(formatSeconds(idle))"
        close()
    }

    /// `direction` has ended and everything it carried is sent: its sink's peer is told (TLS
    /// close_notify); once the other direction has ended too, the tunnel closes. An HTTP/2
    /// connection has no half-closed state (RFC 9113 §5.4.1; gRPC servers keep their side open
    /// after a close_notify): an h2 tunnel closes as soon as one direction has ended.
    private func finish(_ direction: Direction, in tunnel: Tunnel) {
        guard !tunnel.shutDown.contains(direction) else { return }
        tunnel.shutDown.insert(direction)
        if tunnel.shutDown.contains(direction.other) || tunnel.applicationProtocol == .h2 {
            return close()
        }
        ends(of: direction, in: tunnel).sink.shutdownWrite()
    }

    /// Moves what the direction's source has read to its sink. Nothing the upstream sent after
    /// asking to renegotiate is relayed: the tunnel closes instead.
    private func pump(_ direction: Direction, in tunnel: Tunnel) {
        let (source, sink) = ends(of: direction, in: tunnel)
        if direction == .down && tunnel.upstream.connection.renegotiationAttempted {
            return upstreamRenegotiationAttempted()
        }
        let moved = source.moveInput(to: sink)
        guard moved > 0 else { return }
        // A direction that carries more than small messages reads (and so relays) whole TLS
        // records from now on; one that does not keeps libevent's small read reservations,
        // which an idle tunnel holds.
        if moved >= 4096 { source.setReadHighWatermark(config.proxy.relayBufferBytes) }
        tunnel.lastActivity = worker.loop.now
        switch direction {
        case .up:
            tunnel.bytesUp += moved
            worker.shared.metrics.relayed(bytesUp: UInt64(moved), bytesDown: 0)
        case .down:
            tunnel.bytesDown += moved
            worker.shared.metrics.relayed(bytesUp: 0, bytesDown: UInt64(moved))
        }
        if sink.outputLength >= config.proxy.relayBufferBytes { source.setReading(false) }
    }
}
