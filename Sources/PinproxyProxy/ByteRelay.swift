import PinproxyCore
import PinproxyInterop

/// The relay of a `mode = "tunnel"` connection: bytes both ways between the client's socket and
/// the upstream's, as they come (the client's TLS is never opened). A direction holds at most
/// `limit` bytes queued for its sink: past that, its source stops reading until the sink has
/// sent half of them. When a source ends, its sink's socket is shut for writing once all it
/// was sent has gone (TCP half-close), and the other direction goes on. The owner hears what
/// happens through `onEvent` and closes the relay (both sockets) once it is `finished`, or failed.
final class ByteRelay<Endpoint: ConnectionEndpoint> {
    typealias Direction = TLSRelay.Direction

    /// What the relay reports.
    enum Event {
        /// `bytes` went from the direction's source into its sink's queue.
        case relayed(Direction, bytes: Int)
        /// The direction's source stopped sending; its sink is told once the queue is sent.
        case ended(Direction)
        /// Both directions have ended and everything was delivered.
        case finished
        /// The client's socket (`client` true) or the upstream's failed (reset, or a write
        /// error): nothing more can be relayed.
        case failed(client: Bool)
    }

    private let client: Endpoint
    private let upstream: Endpoint
    private let limit: Int
    private var ended: Set<Direction> = []
    /// Directions whose sink's peer has been told (its socket shut for writing).
    private var shutDown: Set<Direction> = []
    var onEvent: ((Event) -> Void)?

    init(client: Endpoint, upstream: Endpoint, limit: Int) {
        self.client = client
        self.upstream = upstream
        self.limit = max(1, limit)
    }

    private func source(of direction: Direction) -> Endpoint { direction == .up ? client : upstream }
    private func sink(of direction: Direction) -> Endpoint { direction == .up ? upstream : client }

    /// Takes over both buffer events' callbacks, relays what is already buffered (the client's
    /// ClientHello), and starts reading both.
    func start() {
        for direction in [Direction.up, .down] {
            let source = source(of: direction), sink = sink(of: direction)
            source.onRead = { [weak self] in self?.pump(direction) }
            source.onEvent = { [weak self] events in self?.event(events, on: direction) }
            sink.onWrite = { [weak self] in self?.drained(direction) }
            sink.setWriteLowWatermark(limit / 2)
        }
        for direction in [Direction.up, .down] {
            source(of: direction).setReading(true)
            pump(direction)
        }
    }

    /// Moves what the source has read to the sink; pauses the source once the sink holds `limit`.
    private func pump(_ direction: Direction) {
        let source = source(of: direction), sink = sink(of: direction)
        let moved = source.moveInput(to: sink)
        if moved > 0 { onEvent?(.relayed(direction, bytes: moved)) }
        if sink.outputLength >= limit { source.setReading(false) }
    }

    /// The sink of `direction` sent enough of its queue: its source reads again, or, once the
    /// source has ended and the queue is empty, the sink's peer is told.
    private func drained(_ direction: Direction) {
        let sink = sink(of: direction)
        if ended.contains(direction) {
            if sink.outputLength == 0 { shutDown(direction) }
        } else if sink.outputLength < limit {
            source(of: direction).setReading(true)
        }
    }

    /// An event on a buffer event, which is the source of `direction` (and the sink of the other).
    private func event(_ events: EndpointEvents, on direction: Direction) {
        if events.contains(.error) || events.contains(.writing) {
            onEvent?(.failed(client: direction == .up))
            return
        }
        guard events.contains(.eof), !ended.contains(direction) else { return }
        pump(direction)
        ended.insert(direction)
        let source = source(of: direction), sink = sink(of: direction)
        source.setReading(false)
        sink.setWriteLowWatermark(0)
        onEvent?(.ended(direction))
        if sink.outputLength == 0 { shutDown(direction) }
    }

    /// Everything `direction` carried was delivered: its sink's peer gets a FIN.
    private func shutDown(_ direction: Direction) {
        guard !shutDown.contains(direction) else { return }
        shutDown.insert(direction)
        sink(of: direction).shutdownWrite()
        if shutDown.count == 2 { onEvent?(.finished) }
    }

    /// Frees both buffer events (closing both sockets).
    func close() {
        onEvent = nil
        client.close()
        upstream.close()
    }
}
