import Glibc
import COpenSSL
import CLibevent
import CPinproxyShims

/// A TLS connection whose handshake is done, taken out of its buffer event for `TLSRelay`:
/// the socket, the SSL, and what libevent had already read or not yet sent.
public final class TLSEndpoint {
    let socket: Int32
    let ssl: OpaquePointer
    /// Application data already decrypted (waiting in the buffer event's input).
    let plaintext: [UInt8]
    /// Encrypted bytes read from the socket that the SSL has not seen yet (a TLS filter's
    /// underlying input); the SSL reads them before the socket.
    let encryptedInput: [UInt8]
    /// Encrypted bytes not yet sent (a TLS filter's underlying output: a session ticket);
    /// they go out before anything else.
    let encryptedOutput: [UInt8]
    /// Whether this end owns a session slot in the SSL's app data (upstream connections).
    let holdsSessionSlot: Bool
    private var owned = true

    init(socket: Int32, ssl: OpaquePointer, plaintext: [UInt8], encryptedInput: [UInt8], encryptedOutput: [UInt8], holdsSessionSlot: Bool) {
        self.socket = socket
        self.ssl = ssl
        self.plaintext = plaintext
        self.encryptedInput = encryptedInput
        self.encryptedOutput = encryptedOutput
        self.holdsSessionSlot = holdsSessionSlot
    }

    /// The relay has taken the SSL and the socket.
    func handOver() { owned = false }

    deinit {
        // Never handed to a relay (the tunnel closed first): freed here.
        guard owned else { return }
        if holdsSessionSlot { releaseSessionSlot(ssl) }
        SSL_free(ssl)
        closeSocket(socket)
    }
}

/// The relay of an open tunnel: pinproxy moves application data between the client's TLS
/// connection and the upstream's itself, with one libevent event per socket and direction.
///
/// Each read takes what the SSL decrypts (OpenSSL reads ahead: one `read` brings several
/// records) into the loop's scratch buffer and writes it to the other SSL at once; nothing is
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

    /// A libevent event of the relay and whether it is registered.
    private struct RegisteredEvent {
        var event: OpaquePointer?
        private(set) var isAdded = false

        mutating func set(_ added: Bool) {
            guard added != isAdded, let event else { return }
            isAdded = added
            if added { event_add(event, nil) } else { event_del(event) }
        }

        mutating func free() {
            if let event { event_free(event) }
            event = nil
            isAdded = false
        }
    }

    /// One TLS connection of the tunnel.
    private final class Side {
        let socket: Int32
        let ssl: OpaquePointer
        let holdsSessionSlot: Bool
        // Only the relay's own callbacks on the loop's thread touch these, and no access
        // overlaps another: no run-time exclusivity checks on the hot path.
        @exclusivity(unchecked) var read = RegisteredEvent()
        @exclusivity(unchecked) var write = RegisteredEvent()
        /// Encrypted bytes that must reach the socket before anything the SSL writes.
        var rawOutput: [UInt8]
        var rawOutputOffset = 0

        init(_ endpoint: TLSEndpoint) {
            socket = endpoint.socket
            ssl = endpoint.ssl
            holdsSessionSlot = endpoint.holdsSessionSlot
            rawOutput = endpoint.encryptedOutput
        }
    }

    private let loop: EventLoop
    private let client: Side
    private let upstream: Side
    /// Each direction's state (`RelayFlow`), up then down. Its transition function calls
    /// nothing back, so no access overlaps another: no run-time exclusivity checks.
    @exclusivity(unchecked) private var flows: [RelayFlow]
    /// The most plaintext one direction reads before its sink has taken it.
    private let readLimit: Int
    /// Set by the upstream's message callback when a HelloRequest arrives.
    private var renegotiationRequested = false
    public var isClosed: Bool {
        if case .closed = flows[0].state { true } else { false }
    }
    public var onEvent: ((Event) -> Void)?

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
        self.client = Side(client)
        self.upstream = Side(upstream)
        self.readLimit = max(1, min(readLimit, EventLoop.relayScratchBytes))
        flows = [client, upstream].map { RelayFlow(buffered: $0.plaintext, input: $0.encryptedInput.isEmpty ? .socket : .buffered) }
        client.handOver()
        upstream.handOver()
        for (side, endpoint) in [(self.client, client), (self.upstream, upstream)] {
            let ssl = side.ssl
            _ = SSL_ctrl(ssl, SSL_CTRL_MODE, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER), nil)
            SSL_set_read_ahead(ssl, 1)
            SSL_set_default_read_buffer_len(ssl, Self.readBufferBytes)
            // The SSL reads from and writes to the socket itself from now on (a TLS filter's
            // SSL still has BIOs over libevent's buffers; SSL_set_bio frees them).
            let socketBIO = BIO_new_socket(side.socket, BIO_NOCLOSE)
            if endpoint.encryptedInput.isEmpty {
                SSL_set_bio(ssl, socketBIO, socketBIO)
            } else {
                let memory = BIO_new(BIO_s_mem())
                _ = endpoint.encryptedInput.withUnsafeBytes { BIO_write(memory, $0.baseAddress, Int32($0.count)) }
                _ = BIO_ctrl(memory, BIO_C_SET_BUF_MEM_EOF_RETURN, -1, nil)  // once empty: "retry", not EOF
                SSL_set_bio(ssl, memory, socketBIO)
            }
        }
        let context = Unmanaged.passUnretained(self).toOpaque()
        // C callbacks capture nothing: each event has its own, which names its side.
        self.client.read.event = event_new(loop.base, self.client.socket, Int16(EV_READ | EV_PERSIST), { _, _, context in
            guard let context else { return }
            Unmanaged<TLSRelay>.fromOpaque(context).takeUnretainedValue().readable(.up)
        }, context)
        self.upstream.read.event = event_new(loop.base, self.upstream.socket, Int16(EV_READ | EV_PERSIST), { _, _, context in
            guard let context else { return }
            Unmanaged<TLSRelay>.fromOpaque(context).takeUnretainedValue().readable(.down)
        }, context)
        self.client.write.event = event_new(loop.base, self.client.socket, Int16(EV_WRITE | EV_PERSIST), { _, _, context in
            guard let context else { return }
            Unmanaged<TLSRelay>.fromOpaque(context).takeUnretainedValue().writable(sinkOf: .down)
        }, context)
        self.upstream.write.event = event_new(loop.base, self.upstream.socket, Int16(EV_WRITE | EV_PERSIST), { _, _, context in
            guard let context else { return }
            Unmanaged<TLSRelay>.fromOpaque(context).takeUnretainedValue().writable(sinkOf: .up)
        }, context)
        // A HelloRequest from the upstream is refused by OpenSSL (SSL_OP_NO_RENEGOTIATION);
        // this notices it, so that nothing the upstream sends after it is relayed.
        SSL_set_msg_callback(self.upstream.ssl) { isWrite, _, contentType, message, length, _, context in
            guard isWrite == 0, contentType == SSL3_RT_HANDSHAKE, length >= 1, let message, let context,
                  message.load(as: UInt8.self) == UInt8(SSL3_MT_HELLO_REQUEST) else { return }
            Unmanaged<TLSRelay>.fromOpaque(context).takeUnretainedValue().renegotiationRequested = true
        }
        _ = SSL_ctrl(self.upstream.ssl, SSL_CTRL_SET_MSG_CALLBACK_ARG, 0, context)
    }

    /// Starts relaying: what was buffered before goes first, then both sockets are read.
    public func start() {
        _ = flushRawOutput(client)
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
        clearStaleErrors()
        pump(direction)
        registerEvents()
    }

    /// The sink of `direction` can take bytes again: what waited for it goes out, in order —
    /// bytes from before the relay, a close_notify, a read that needed to write, pending data.
    private func writable(sinkOf direction: Direction) {
        clearStaleErrors()
        defer { registerEvents() }
        let side = sink(of: direction)
        let hadRawOutput = !side.rawOutput.isEmpty
        guard flushRawOutput(side) else { return }
        if hadRawOutput {
            // Reading this side waited for those bytes (whatever the SSL writes must follow them).
            pump(direction.other)
            guard !isClosed else { return }
        }
        if case .ended(.queued) = flows[index(direction)].state {
            perform(transition(direction, .sinkWritable), in: direction)
            if case .ended(.queued) = flows[index(direction)].state { return }
        }
        perform(transition(direction.other, .sourceWritable), in: direction.other)
        guard !isClosed else { return }
        perform(transition(direction, .sinkWritable), in: direction)
    }

    /// The thread's OpenSSL error queue must be empty before an SSL call for SSL_get_error to
    /// be right; pinproxy drains it after every failure, so this rarely has anything to do.
    private func clearStaleErrors() {
        if ERR_peek_error() != 0 { ERR_clear_error() }
    }

    // MARK: The state machine

    /// Feeds an event to the direction's state.
    private func transition(_ direction: Direction, _ event: RelayFlow.Event) -> RelayFlow.Action {
        flows[index(direction)].handle(event)
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
            // The bytes buffered before the relay are used up (a partial record stays in the
            // SSL): the socket from now on. SSL_set0_rbio frees the memory BIO.
            let source = source(of: direction)
            SSL_set0_rbio(source.ssl, BIO_new_socket(source.socket, BIO_NOCLOSE))
            pump(direction)
        case .releaseReadBuffer:
            // An idle connection holds no read buffer (OpenSSL keeps the one it allocated for a
            // read that found nothing).
            SSL_free_buffers(source(of: direction).ssl)
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
        let up = index(.up), down = index(.down)
        client.read.set(flows[up].readsSource)
        upstream.read.set(flows[down].readsSource)
        client.write.set(flows[down].needsSinkWritable || flows[up].needsSourceWritable || waitsToSendRawOutput(client))
        upstream.write.set(flows[up].needsSinkWritable || flows[down].needsSourceWritable || waitsToSendRawOutput(upstream))
    }

    /// Whether the side's bytes from before the relay wait for its socket (found full).
    private func waitsToSendRawOutput(_ side: Side) -> Bool {
        !side.rawOutput.isEmpty && side.write.isAdded
    }

    // MARK: Moving bytes

    /// Reads what the direction's source has and writes it to the sink, until the source has
    /// nothing more, the sink is full, or this pass's share is used. The pass's bytes are
    /// reported once, before anything else it reports.
    private func pump(_ direction: Direction) {
        let source = source(of: direction)
        guard source.rawOutput.isEmpty, case .read(let input) = transition(direction, .readable) else { return }
        let sink = sink(of: direction)
        let scratch = loop.relayScratch
        var relayed = 0
        for _ in 0..<Self.recordsPerPass {
            let count = SSL_read(source.ssl, scratch, Int32(readLimit))
            if direction == .down && renegotiationRequested {
                // Nothing from this read is relayed.
                guard reportRelayed(relayed, in: direction) else { return }
                _ = drainErrorQueue()
                return perform(transition(direction, .renegotiationRequested), in: direction)
            }
            guard count > 0 else {
                guard reportRelayed(relayed, in: direction) else { return }
                return readFailed(direction, result: count)
            }
            relayed += Int(count)
            // Bytes queued for the sink before (from before the relay, or what its SSL must
            // send for a read of the other direction) leave first.
            let queueBehind = !sink.rawOutput.isEmpty || flows[index(direction.other)].needsSourceWritable
            switch write(UnsafeRawBufferPointer(start: scratch, count: Int(count)), in: direction, queueBehind: queueBehind) {
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
            guard SSL_has_pending(source.ssl) == 1 || Int(count) == readLimit || input == .buffered else {
                // Waiting for the socket: the SSL's read buffer goes back to the allocator.
                SSL_free_buffers(source.ssl)
                _ = reportRelayed(relayed, in: direction)
                return
            }
        }
        guard reportRelayed(relayed, in: direction) else { return }
        // This pass's share is used: the rest on the loop's next pass. The read event is
        // registered first (libevent does not register an event that is already active).
        source.read.set(true)
        if let event = source.read.event { event_active(event, EV_READ, 0) }
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

    /// Writes `bytes` to the direction's sink (all of them queued if `queueBehind`); what it
    /// cannot take now becomes the direction's pending bytes, and the source pauses.
    private func write(_ bytes: UnsafeRawBufferPointer, in direction: Direction, queueBehind: Bool) -> WriteOutcome {
        let sink = sink(of: direction)
        var offset = 0
        if !queueBehind {
            while offset < bytes.count {
                let written = SSL_write(sink.ssl, bytes.baseAddress! + offset, Int32(bytes.count - offset))  // non-empty: never nil
                if written > 0 {
                    offset += Int(written)
                    continue
                }
                let error = SSL_get_error(sink.ssl, written)
                _ = drainErrorQueue()
                guard error == SSL_ERROR_WANT_WRITE else { return .failed }
                break
            }
        }
        guard offset < bytes.count else { return .written }
        _ = transition(direction, .sinkFull(rest: Array(bytes[offset...])))
        return .queued
    }

    /// Relays the plaintext decrypted before the relay (at the start): reported, then written
    /// to the sink once the sink's own bytes from before the relay have left.
    private func deliverBuffered(_ bytes: [UInt8], in direction: Direction) {
        report(.relayed(direction, bytes: bytes.count))
        guard !isClosed else { return }
        guard flushRawOutput(sink(of: direction)) else {
            _ = transition(direction, .sinkFull(rest: bytes))
            return
        }
        let outcome = bytes.withUnsafeBytes { write($0, in: direction, queueBehind: false) }
        switch outcome {
        case .written: pump(direction)
        case .queued: break
        case .failed: perform(transition(direction, .sinkFailed), in: direction)
        }
    }

    /// Writes the direction's pending bytes; once all are written, the source reads again.
    private func writePending(_ direction: Direction) {
        let sink = sink(of: direction)
        guard flushRawOutput(sink) else { return }
        while case .waitingToWrite(let pending, let offset, _) = flows[index(direction)].state {
            let written = pending.withUnsafeBytes { bytes in
                SSL_write(sink.ssl, bytes.baseAddress! + offset, Int32(pending.count - offset))  // pending: never nil
            }
            if written > 0 {
                let action = transition(direction, .wrote(count: Int(written)))
                guard action == .writePending else { return perform(action, in: direction) }
                continue
            }
            let error = SSL_get_error(sink.ssl, written)
            _ = drainErrorQueue()
            guard error == SSL_ERROR_WANT_WRITE else { return perform(transition(direction, .sinkFailed), in: direction) }
            return  // the sink's write event stays registered
        }
    }

    /// Sends what must reach the socket before the SSL writes; whether all of it has.
    private func flushRawOutput(_ side: Side) -> Bool {
        while side.rawOutputOffset < side.rawOutput.count {
            let sent = side.rawOutput.withUnsafeBytes { bytes in
                Glibc.send(side.socket, bytes.baseAddress! + side.rawOutputOffset, bytes.count - side.rawOutputOffset, Int32(MSG_NOSIGNAL))  // non-empty: never nil
            }
            if sent > 0 {
                side.rawOutputOffset += sent
            } else if sent < 0 && (errno == EAGAIN || errno == EINTR) {
                side.write.set(true)
                return false
            } else {
                // The socket is gone: the SSL's own write will fail and say so.
                break
            }
        }
        side.rawOutput = []
        side.rawOutputOffset = 0
        return true
    }

    /// A read that returned `result` (≤ 0): nothing yet, a wait for the socket, or the end of
    /// the direction.
    private func readFailed(_ direction: Direction, result: Int32) {
        let error = SSL_get_error(source(of: direction).ssl, result)
        _ = drainErrorQueue()
        switch error {
        case SSL_ERROR_WANT_READ:
            perform(transition(direction, .readWouldBlock), in: direction)
        case SSL_ERROR_WANT_WRITE:
            // The SSL must answer something (a TLS 1.3 KeyUpdate) and the socket is full.
            perform(transition(direction, .readNeedsWrite), in: direction)
        default:
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
        guard case .ended(.notAsked) = flows[index(direction)].state else { return }
        clearStaleErrors()
        defer { registerEvents() }
        _ = transition(direction, .shutdownWrite)
        guard flushRawOutput(sink(of: direction)) else { return }
        sendCloseNotify(direction)
    }

    /// Sends (or, once queued, sends on) the close_notify of the direction's sink. SSL_shutdown
    /// is called again only while the alert waits in the SSL: a further call would wait for
    /// the peer's.
    private func sendCloseNotify(_ direction: Direction) {
        let sink = sink(of: direction)
        let result = SSL_shutdown(sink.ssl)
        let error = result < 0 ? SSL_get_error(sink.ssl, result) : SSL_ERROR_NONE
        _ = drainErrorQueue()
        // On SSL_ERROR_WANT_WRITE it stays queued in the SSL; the next SSL_shutdown sends it
        // (and only that).
        if error != SSL_ERROR_WANT_WRITE { _ = transition(direction, .closeNotifySent) }
    }

    /// Frees both connections: each gets a close_notify if it has not had one (best effort:
    /// the socket is not waited for), then the SSLs are freed and the sockets closed.
    public func close() {
        guard !isClosed else { return }
        onEvent = nil
        // The client is the sink of down, the upstream that of up.
        let notifyClient = transition(.down, .close) == .sendCloseNotify
        let notifyUpstream = transition(.up, .close) == .sendCloseNotify
        for (side, notify) in [(client, notifyClient), (upstream, notifyUpstream)] {
            side.read.free()
            side.write.free()
            _ = SSL_ctrl(side.ssl, SSL_CTRL_SET_MSG_CALLBACK_ARG, 0, nil)
            SSL_set_msg_callback(side.ssl, nil)
            if notify { _ = SSL_shutdown(side.ssl) }
            _ = drainErrorQueue()
            if side.holdsSessionSlot { releaseSessionSlot(side.ssl) }
            SSL_free(side.ssl)
            closeSocket(side.socket)
        }
    }

    // MARK: Helpers

    private func index(_ direction: Direction) -> Int { direction == .up ? 0 : 1 }

    private func source(of direction: Direction) -> Side { direction == .up ? client : upstream }

    private func sink(of direction: Direction) -> Side { direction == .up ? upstream : client }
}

extension EventLoop {
    /// The size of `relayScratch`: one TLS record's plaintext.
    static let relayScratchBytes = 16 * 1024
}
