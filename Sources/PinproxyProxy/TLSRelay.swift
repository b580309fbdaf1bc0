import PinproxyInterop
import PinproxyCore

/// The relay of an open tunnel: pinproxy moves application data between the client's TLS
/// connection and the upstream's itself, with one libevent event per socket and direction.
///
/// Each read takes what the SSL decrypts (OpenSSL reads ahead: one `read` brings several
/// records) into the loop's scratch buffer (`TLSEndpoint.readIntoScratch`) and writes it to the
/// other SSL at once; nothing is
/// copied or kept unless the other side cannot take it. Then the rest waits in the direction's
/// state (`RelayFlow.waitingToWrite`, at most one read's worth), the source stops reading, and
/// the sink waits to be writable. An idle tunnel holds no buffer: read events stay registered,
/// the SSLs release theirs (`SSL_MODE_RELEASE_BUFFERS`), and nothing else is allocated.
///
/// Each direction's state is a `RelayFlow`: every event goes through its one transition
/// function, the relay does the I/O it answers with, and the libevent events registered at the
/// end of each callback are the ones the two states ask for.
///
/// The owner hears what happens through `onEvent` and decides what it means (half-close,
/// close); `close` frees everything once.
public final class TLSRelay {
    /// A direction: up is client to upstream.
    public enum Direction: Sendable {
        case up, down

        public var other: Direction { self == .up ? .down : .up }
    }

    /// What the relay reports.
    public enum Event {
        /// `bytes` of application data went from the direction's source to its sink (or are
        /// queued for it, or were refused by it): one report per relay pass, before any other
        /// event of that pass.
        case relayed(Direction, bytes: Int)
        /// The direction's source stopped sending (close_notify, end of stream, or a read error).
        /// Everything it sent before has been handed to the sink's socket: a direction reads
        /// only while nothing of it is pending.
        case ended(Direction)
        /// The direction's sink cannot be written to: nothing more can be delivered to it.
        case writeFailed(Direction)
        /// The upstream asked for a TLS renegotiation (refused); nothing it sent after the
        /// request has been relayed.
        case renegotiationAttempted
    }

    /// Held: the endpoints read into its scratch buffer.
    private let loop: EventLoop
    private let client: TLSEndpoint
    private let upstream: TLSEndpoint
    /// Each direction's state (`RelayFlow`), in the relay itself (no array of its own). Its
    /// transition function calls nothing back, so no access overlaps another: no run-time
    /// exclusivity checks.
    @exclusivity(unchecked) private var upFlow: RelayFlow
    @exclusivity(unchecked) private var downFlow: RelayFlow
    /// The most plaintext one direction reads before its sink has taken it.
    private let readLimit: Int
    public var isClosed: Bool {
        if case .closed = upFlow.state { true } else { false }
    }
    /// Set before `start` and cleared by `close`, read on every pass: no run-time exclusivity
    /// checks.
    @exclusivity(unchecked) public var onEvent: ((Event) -> Void)?

    /// The most records one direction relays in one pass before the loop serves others.
    static let recordsPerPass = 16
    /// OpenSSL's read buffer while relaying: room for four full records, so one `read`
    /// brings several.
    static let readBufferBytes = 4 * (16 * 1024 + 256)

    /// Takes over both connections. `readLimit` (the `relay_buffer_bytes`, at most one
    /// record) bounds what one direction holds while its sink is full. Call `start` once the
    /// owner has set `onEvent`.
    public init(loop: EventLoop, client: TLSEndpoint, upstream: TLSEndpoint, readLimit: Int) {
        self.loop = loop
        self.client = client
        self.upstream = upstream
        self.readLimit = max(1, min(readLimit, EventLoop.relayScratchBytes))
        upFlow = RelayFlow(buffered: client.takePlaintext(), input: client.hasBufferedInput ? .buffered : .socket)
        downFlow = RelayFlow(buffered: upstream.takePlaintext(), input: upstream.hasBufferedInput ? .buffered : .socket)
        for endpoint in [client, upstream] {
            endpoint.startRelaying(readBufferBytes: Self.readBufferBytes)
        }
        // The endpoints live no longer than the relay, which closes them (and so their events).
        client.prepareEvents(on: loop, readable: { [unowned(unsafe) self] in readable(.up) },
                             writable: { [unowned(unsafe) self] in writable(sinkOf: .down) })
        upstream.prepareEvents(on: loop, readable: { [unowned(unsafe) self] in readable(.down) },
                               writable: { [unowned(unsafe) self] in writable(sinkOf: .up) })
        upstream.watchForRenegotiation()
    }

    /// Starts relaying: what was buffered before goes first, then both sockets are read.
    public func start() {
        _ = client.flushUnsentOutput()
        for direction in [Direction.up, .down] {
            perform(transition(direction, .start), in: direction)
            guard !isClosed else { return }
        }
        registerEvents()
    }

    deinit {
        close()
    }

    // MARK: Events

    /// The direction's source has bytes.
    private func readable(_ direction: Direction) {
        TLSEndpoint.clearStaleErrors()
        pump(direction)
        registerEvents()
    }

    /// The sink of `direction` can take bytes again: what waited for it goes out, in order —
    /// bytes from before the relay, a close_notify, a read that needed to write, pending data.
    private func writable(sinkOf direction: Direction) {
        TLSEndpoint.clearStaleErrors()
        defer { registerEvents() }
        let side = sink(of: direction)
        let hadUnsentOutput = side.hasUnsentOutput
        guard side.flushUnsentOutput() else { return }
        if hadUnsentOutput {
            // Reading this side waited for those bytes (whatever the SSL writes must follow them).
            pump(direction.other)
            guard !isClosed else { return }
        }
        if case .ended(.queued) = flow(direction).state {
            perform(transition(direction, .sinkWritable), in: direction)
            if case .ended(.queued) = flow(direction).state { return }
        }
        perform(transition(direction.other, .sourceWritable), in: direction.other)
        guard !isClosed else { return }
        perform(transition(direction, .sinkWritable), in: direction)
    }

    // MARK: The state machine

    /// Feeds an event to the direction's state.
    private func transition(_ direction: Direction, _ event: RelayFlow.Event) -> RelayFlow.Action {
        direction == .up ? upFlow.handle(event) : downFlow.handle(event)
    }

    /// Does what the direction's state answered.
    private func perform(_ action: RelayFlow.Action, in direction: Direction) {
        switch action {
        case .none:
            break
        case .deliverBuffered(let bytes):
            deliverBuffered(bytes, in: direction)
        case .read:
            pump(direction)
        case .writePending:
            writePending(direction)
        case .readFromSocket:
            // The bytes buffered before the relay are used up: the socket from now on.
            source(of: direction).readFromSocket()
            pump(direction)
        case .releaseReadBuffer:
            // An idle connection holds no read buffer.
            source(of: direction).releaseReadBuffer()
        case .reportEnded:
            report(.ended(direction))
        case .reportSinkFailed:
            report(.writeFailed(direction))
        case .reportRenegotiation:
            report(.renegotiationAttempted)
        case .sendCloseNotify:
            sendCloseNotify(direction)
        }
    }

    /// Registers the libevent events the states ask for (and only those): a source is read while
    /// its direction reads; a socket is waited on while bytes from before the relay, pending
    /// bytes, a close_notify or a read that must write wait for it.
    private func registerEvents() {
        guard !isClosed else { return }
        client.watch(readable: upFlow.readsSource, writable: downFlow.needsSinkWritable || upFlow.needsSourceWritable)
        upstream.watch(readable: downFlow.readsSource, writable: upFlow.needsSinkWritable || downFlow.needsSourceWritable)
    }

    // MARK: Moving bytes

    /// Reads what the direction's source has and writes it to the sink, until the source has
    /// nothing more, the sink is full, or this pass's share is used. The pass's bytes are
    /// reported once, before anything else it reports.
    private func pump(_ direction: Direction) {
        let source = source(of: direction)
        guard !source.hasUnsentOutput, case .read(let input) = transition(direction, .readable) else { return }
        let sink = sink(of: direction)
        var relayed = 0
        for _ in 0..<Self.recordsPerPass {
            let result = source.readIntoScratch(maxLength: readLimit)
            if direction == .down && upstream.renegotiationRequested {
                // Nothing from this read is relayed.
                guard reportRelayed(relayed, in: direction) else { return }
                return perform(transition(direction, .renegotiationRequested), in: direction)
            }
            guard case .read(let count) = result else {
                guard reportRelayed(relayed, in: direction) else { return }
                return readFailed(direction, result: result)
            }
            relayed += count
            // Bytes queued for the sink before (from before the relay, or what its SSL must
            // send for a read of the other direction) leave first.
            let queueBehind = sink.hasUnsentOutput || flow(direction.other).needsSourceWritable
            switch write(.scratch(count: count), in: direction, queueBehind: queueBehind) {
            case .written:
                break
            case .queued:
                _ = reportRelayed(relayed, in: direction)
                return
            case .failed:
                guard reportRelayed(relayed, in: direction) else { return }
                return perform(transition(direction, .sinkFailed), in: direction)
            }
            // With read-ahead the SSL may hold more records than the socket shows: drain
            // them now, or they would wait for bytes that may never come. A full record
            // means bulk, where the socket has more: reading on saves a wait in epoll.
            guard source.hasPendingInput || count == readLimit || input == .buffered else {
                // Waiting for the socket: the SSL's read buffer goes back to the allocator.
                source.releaseReadBuffer()
                _ = reportRelayed(relayed, in: direction)
                return
            }
        }
        guard reportRelayed(relayed, in: direction) else { return }
        // This pass's share is used: the rest on the loop's next pass. The read event is
        // registered first (libevent does not register an event that is already active).
        source.readAgainSoon()
    }

    /// Reports a pass's bytes (if any); whether the relay is still open.
    private func reportRelayed(_ bytes: Int, in direction: Direction) -> Bool {
        if bytes > 0 && !isClosed { report(.relayed(direction, bytes: bytes)) }
        return !isClosed
    }

    /// What became of bytes handed to a sink.
    private enum WriteOutcome {
        case written
        /// The sink is full: the rest is the direction's pending bytes, and the source pauses.
        case queued
        /// The sink cannot be written to.
        case failed
    }

    /// Bytes for a sink: a read's, in the loop's scratch buffer (`TLSEndpoint.readIntoScratch`),
    /// or bytes kept from before.
    private enum Chunk {
        case scratch(count: Int)
        case kept([UInt8])
    }

    /// Writes `chunk` to the direction's sink (all of it queued if `queueBehind`); what it
    /// cannot take now becomes the direction's pending bytes, and the source pauses.
    private func write(_ chunk: Chunk, in direction: Direction, queueBehind: Bool) -> WriteOutcome {
        let sink = sink(of: direction)
        let count = switch chunk {
        case .scratch(let count): count
        case .kept(let bytes): bytes.count
        }
        var offset = 0
        if !queueBehind {
            writing: while offset < count {
                let result = switch chunk {
                case .scratch: sink.writeScratch(offset..<count)
                case .kept(let bytes): sink.write(bytes, from: offset)
                }
                switch result {
                case .wrote(let written): offset += written
                case .full: break writing
                case .failed: return .failed
                }
            }
        }
        guard offset < count else { return .written }
        let rest = switch chunk {
        case .scratch: sink.scratchBytes(offset..<count)
        case .kept(let bytes): Array(bytes[offset...])
        }
        _ = transition(direction, .sinkFull(rest: rest))
        return .queued
    }

    /// Relays the plaintext decrypted before the relay (at the start): reported, then written
    /// to the sink once the sink's own bytes from before the relay have left.
    private func deliverBuffered(_ bytes: [UInt8], in direction: Direction) {
        report(.relayed(direction, bytes: bytes.count))
        guard !isClosed else { return }
        guard sink(of: direction).flushUnsentOutput() else {
            _ = transition(direction, .sinkFull(rest: bytes))
            return
        }
        switch write(.kept(bytes), in: direction, queueBehind: false) {
        case .written: pump(direction)
        case .queued: break
        case .failed: perform(transition(direction, .sinkFailed), in: direction)
        }
    }

    /// Writes the direction's pending bytes; once all are written, the source reads again.
    private func writePending(_ direction: Direction) {
        let sink = sink(of: direction)
        guard sink.flushUnsentOutput() else { return }
        while case .waitingToWrite(let pending, let offset, _) = flow(direction).state {
            switch sink.write(pending, from: offset) {
            case .wrote(let count):
                let action = transition(direction, .wrote(count: count))
                guard action == .writePending else { return perform(action, in: direction) }
            case .full:
                return  // the sink's write event stays registered
            case .failed:
                return perform(transition(direction, .sinkFailed), in: direction)
            }
        }
    }

    /// A read that brought no data: nothing yet, a wait for the socket, or the end of the
    /// direction.
    private func readFailed(_ direction: Direction, result: TLSEndpoint.ReadResult) {
        switch result {
        case .read, .wouldBlock:  // (a read with data does not come here)
            perform(transition(direction, .readWouldBlock), in: direction)
        case .needsWrite:
            // The SSL must answer something (a TLS 1.3 KeyUpdate) and the socket is full.
            perform(transition(direction, .readNeedsWrite), in: direction)
        case .ended:
            // close_notify, the end of the stream, or a broken connection: the direction ends.
            perform(transition(direction, .sourceEnded), in: direction)
        }
    }

    private func report(_ event: Event) {
        onEvent?(event)
    }

    // MARK: Control

    /// Tells the direction's sink that nothing more comes (TLS close_notify), once the
    /// direction has ended; the other direction goes on.
    public func shutdownWrite(_ direction: Direction) {
        guard case .ended(.notAsked) = flow(direction).state else { return }
        TLSEndpoint.clearStaleErrors()
        defer { registerEvents() }
        _ = transition(direction, .shutdownWrite)
        guard sink(of: direction).flushUnsentOutput() else { return }
        sendCloseNotify(direction)
    }

    /// Sends (or, once queued, sends on) the close_notify of the direction's sink. SSL_shutdown
    /// is called again only while the alert waits in the SSL: a further call would wait for
    /// the peer's.
    private func sendCloseNotify(_ direction: Direction) {
        // While the socket is full it stays queued in the SSL; the next call sends it (and only that).
        if sink(of: direction).sendCloseNotify() { _ = transition(direction, .closeNotifySent) }
    }

    /// Frees both connections: each gets a close_notify if it has not had one (best effort:
    /// the socket is not waited for), then the SSLs are freed and the sockets closed.
    public func close() {
        guard !isClosed else { return }
        onEvent = nil
        // The client is the sink of down, the upstream that of up.
        let notifyClient = transition(.down, .close) == .sendCloseNotify
        let notifyUpstream = transition(.up, .close) == .sendCloseNotify
        client.close(sendingCloseNotify: notifyClient)
        upstream.close(sendingCloseNotify: notifyUpstream)
    }

    // MARK: Helpers

    private func flow(_ direction: Direction) -> RelayFlow { direction == .up ? upFlow : downFlow }

    private func source(of direction: Direction) -> TLSEndpoint { direction == .up ? client : upstream }

    private func sink(of direction: Direction) -> TLSEndpoint { direction == .up ? upstream : client }
}
