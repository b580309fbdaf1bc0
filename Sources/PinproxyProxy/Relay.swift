import Foundation
import PinproxyInterop

extension ClientConnection {
    /// Step 9: bytes both ways between the two TLS sessions. Each direction buffers at most
    /// `relay_buffer_bytes` before its reader pauses (resumed when the writer drains to half).
    /// Half-close: when one side stops sending, what it sent is delivered, then the other peer
    /// gets a TLS close_notify while the opposite direction goes on; once both have ended,
    /// both sides are closed. A tunnel with no traffic either way for `idle_timeout` is closed.
    func relay() {
        guard let upstream else { return close() }
        phase = .relaying
        relayStarted = Date()
        lastActivity = worker.loop.now
        worker.shared.tunnelOpened()
        connect(from: clientSide, to: upstream, direction: .up)
        connect(from: upstream, to: clientSide, direction: .down)
        let idle = config.proxy.idleTimeout
        phaseTimer = Timer(loop: worker.loop, after: max(0.05, idle / 4), repeats: true) { [weak self] in
            guard let self, self.worker.loop.now - self.lastActivity >= idle else { return }
            self.closeReason = "idle for \(formatSeconds(idle))"
            self.close()
        }
        clientSide.setReading(true)
        upstream.setReading(true)
        // Bytes that arrived before the tunnel opened (early data, a server banner).
        pump(from: clientSide, to: upstream, direction: .up)
        pump(from: upstream, to: clientSide, direction: .down)
    }

    /// A direction of the tunnel: up is client to upstream.
    enum Direction {
        case up, down

        var other: Direction { self == .up ? .down : .up }
    }

    private func connect(from source: BufferEvent, to sink: BufferEvent, direction: Direction) {
        let limit = config.proxy.relayBufferBytes
        sink.setWriteLowWatermark(limit / 2)
        source.onRead = { [weak self, unowned source, unowned sink] in
            self?.pump(from: source, to: sink, direction: direction)
        }
        sink.onWrite = { [weak self, unowned source, unowned sink] in
            guard let self else { return }
            if self.ended.contains(direction) {
                if sink.outputLength == 0 { self.finish(direction, sink: sink) }
            } else if !source.isReading && !source.isClosed {
                source.setReading(true)
            }
        }
        source.onEvent = { [weak self, unowned source, unowned sink] events in
            guard let self else { return }
            if events.contains(.error) && events.contains(.writing) {
                // This side cannot take what the other sends: nothing more can be delivered.
                self.closeReason = direction == .up ? "client connection error" : "upstream connection error"
                return self.close()
            }
            if events.contains(.eof) || events.contains(.error) || events.contains(.timeout) {
                // The side stopped sending (cleanly or not): deliver what it sent first.
                self.pump(from: source, to: sink, direction: direction)
                source.setReading(false)
                self.ended.insert(direction)
                if self.closeReason.isEmpty { self.closeReason = direction == .up ? "client closed" : "upstream closed" }
                sink.setWriteLowWatermark(0)
                if sink.outputLength == 0 { self.finish(direction, sink: sink) }
            }
        }
    }

    /// `direction` has ended and everything it carried is sent: its sink's peer is told (TLS
    /// close_notify); once the other direction has ended too, the tunnel closes.
    private func finish(_ direction: Direction, sink: BufferEvent) {
        guard !shutDown.contains(direction) else { return }
        shutDown.insert(direction)
        if shutDown.contains(direction.other) {
            return close()
        }
        sink.shutdownWrite()
    }

    private func pump(from source: BufferEvent, to sink: BufferEvent, direction: Direction) {
        let moved = source.moveInput(to: sink)
        guard moved > 0 else { return }
        // A direction that carries more than small messages reads (and so relays) whole TLS
        // records from now on; one that does not keeps libevent's small read reservations,
        // which an idle tunnel holds.
        if moved >= 4096 { source.setReadHighWatermark(config.proxy.relayBufferBytes) }
        lastActivity = worker.loop.now
        switch direction {
        case .up:
            bytesUp += moved
            worker.shared.metrics.relayed(bytesUp: UInt64(moved), bytesDown: 0)
        case .down:
            bytesDown += moved
            worker.shared.metrics.relayed(bytesUp: 0, bytesDown: UInt64(moved))
        }
        if sink.outputLength >= config.proxy.relayBufferBytes { source.setReading(false) }
    }
}
