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
/// `pending` bytes (at most one read's worth), the source stops reading, and the sink waits to
/// be writable. An idle tunnel holds no buffer: read events stay registered, the SSLs release
/// theirs (`SSL_MODE_RELEASE_BUFFERS`), and nothing else is allocated.
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

    /// One TLS connection of the tunnel.
    private final class Side {
        let socket: Int32
        let ssl: OpaquePointer
        let holdsSessionSlot: Bool
        var readEvent: OpaquePointer?
        var writeEvent: OpaquePointer?
        var isReading = false
        var isWaitingToWrite = false
        /// Encrypted bytes that must reach the socket before anything the SSL writes.
        var rawOutput: [UInt8]
        var rawOutputOffset = 0
        /// While the SSL reads encrypted bytes that were buffered before the relay (from a memory
        /// BIO, which the socket's BIO replaces once they are used up).
        var readsBufferedInput = false
        /// The SSL asked to write while reading (a TLS 1.3 KeyUpdate answer).
        var readWaitsForWrite = false
        /// close_notify is queued and waits for the socket.
        var closeNotifyPending = false
        var closeNotifySent = false

        init(_ endpoint: TLSEndpoint) {
            socket = endpoint.socket
            ssl = endpoint.ssl
            holdsSessionSlot = endpoint.holdsSessionSlot
            rawOutput = endpoint.encryptedOutput
        }
    }

    /// Application data of one direction that its sink could not take yet.
    private struct Flow {
        var pending: [UInt8] = []
        var offset = 0
        var ended = false

        var hasPending: Bool { offset < pending.count }
    }

    private let loop: EventLoop
    private let client: Side
    private let upstream: Side
    private var flows = [Flow(), Flow()]
    /// The most plaintext one direction reads before its sink has taken it.
    private let readLimit: Int
    private var renegotiationRequested = false
    private var renegotiationReported = false
    public private(set) var isClosed = false
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
        flows[index(.up)].pending = client.plaintext
        flows[index(.down)].pending = upstream.plaintext
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
                side.readsBufferedInput = true
            }
        }
        let context = Unmanaged.passUnretained(self).toOpaque()
        // C callbacks capture nothing: each event has its own, which names its side.
        self.client.readEvent = event_new(loop.base, self.client.socket, Int16(EV_READ | EV_PERSIST), { _, _, context in
            guard let context else { return }
            Unmanaged<TLSRelay>.fromOpaque(context).takeUnretainedValue().readable(.up)
        }, context)
        self.upstream.readEvent = event_new(loop.base, self.upstream.socket, Int16(EV_READ | EV_PERSIST), { _, _, context in
            guard let context else { return }
            Unmanaged<TLSRelay>.fromOpaque(context).takeUnretainedValue().readable(.down)
        }, context)
        self.client.writeEvent = event_new(loop.base, self.client.socket, Int16(EV_WRITE | EV_PERSIST), { _, _, context in
            guard let context else { return }
            Unmanaged<TLSRelay>.fromOpaque(context).takeUnretainedValue().writable(sinkOf: .down)
        }, context)
        self.upstream.writeEvent = event_new(loop.base, self.upstream.socket, Int16(EV_WRITE | EV_PERSIST), { _, _, context in
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
            if flows[index(direction)].hasPending {
                let count = flows[index(direction)].pending.count
                report(.relayed(direction, bytes: count))
                guard !isClosed else { return }
                flushPending(direction)
            } else {
                setReading(source(of: direction), true)
                pump(direction)
            }
            guard !isClosed else { return }
        }
    }

    deinit {
        close()
    }

    // MARK: Events

    /// The direction's source has bytes.
    private func readable(_ direction: Direction) {
        clearStaleErrors()
        pump(direction)
    }

    /// The sink of `direction` can take bytes again: what waited for it goes out, in order —
    /// bytes from before the relay, a close_notify, a read that needed to write, pending data.
    private func writable(sinkOf direction: Direction) {
        clearStaleErrors()
        let side = sink(of: direction)
        let hadRawOutput = !side.rawOutput.isEmpty
        guard flushRawOutput(side) else { return }
        if hadRawOutput {
            // Reading this side waited for those bytes (whatever the SSL writes must follow them).
            pump(direction.other)
            guard !isClosed else { return }
        }
        if side.closeNotifyPending {
            sendCloseNotify(side)
            guard !side.closeNotifyPending else { return }
        }
        if side.readWaitsForWrite {
            side.readWaitsForWrite = false
            let sourced = direction.other
            if !flows[index(sourced)].ended && !flows[index(sourced)].hasPending { setReading(side, true) }
            pump(sourced)
            guard !isClosed else { return }
        }
        if flows[index(direction)].hasPending {
            flushPending(direction)
        } else if !side.readWaitsForWrite && !side.closeNotifyPending {
            setWaitingToWrite(side, false)
        }
    }

    /// The thread's OpenSSL error queue must be empty before an SSL call for SSL_get_error to
    /// be right; pinproxy drains it after every failure, so this rarely has anything to do.
    private func clearStaleErrors() {
        if ERR_peek_error() != 0 { ERR_clear_error() }
    }

    // MARK: Moving bytes

    /// Reads what the direction's source has and writes it to the sink, until the source has
    /// nothing more, the sink is full, or this pass's share is used. The pass's bytes are
    /// reported once, before anything else it reports.
    private func pump(_ direction: Direction) {
        let source = source(of: direction)
        guard !isClosed, !flows[index(direction)].ended, !flows[index(direction)].hasPending, source.isReading,
              !source.readWaitsForWrite, source.rawOutput.isEmpty else { return }
        let scratch = loop.relayScratch
        var relayed = 0
        for _ in 0..<Self.recordsPerPass {
            let count = SSL_read(source.ssl, scratch, Int32(readLimit))
            if direction == .down && renegotiationRequested {
                // Nothing from this read is relayed.
                guard reportRelayed(relayed, in: direction) else { return }
                return reportRenegotiation()
            }
            guard count > 0 else {
                guard reportRelayed(relayed, in: direction) else { return }
                return readFailed(direction, result: count)
            }
            relayed += Int(count)
            switch write(UnsafeRawBufferPointer(start: scratch, count: Int(count)), in: direction) {
            case .written:
                break
            case .queued:
                _ = reportRelayed(relayed, in: direction)
                return
            case .failed:
                guard reportRelayed(relayed, in: direction) else { return }
                return writeFailed(direction)
            }
            // With read-ahead the SSL may hold more records than the socket shows: drain
            // them now, or they would wait for bytes that may never come. A full record
            // means bulk, where the socket has more: reading on saves a wait in epoll.
            guard SSL_has_pending(source.ssl) == 1 || Int(count) == readLimit || source.readsBufferedInput else {
                // Waiting for the socket: the SSL's read buffer goes back to the allocator.
                SSL_free_buffers(source.ssl)
                _ = reportRelayed(relayed, in: direction)
                return
            }
        }
        guard reportRelayed(relayed, in: direction) else { return }
        // This pass's share is used: the rest on the loop's next pass.
        if let event = source.readEvent { event_active(event, EV_READ, 0) }
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

    /// Writes `bytes` to the direction's sink; what it cannot take now becomes the direction's
    /// pending bytes, and the source pauses.
    private func write(_ bytes: UnsafeRawBufferPointer, in direction: Direction) -> WriteOutcome {
        let sink = sink(of: direction)
        var offset = 0
        if sink.rawOutputOffset < sink.rawOutput.count || sink.isWaitingToWrite {
            // Bytes queued before must leave first.
        } else {
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
        var flow = Flow()
        flow.pending = Array(bytes[offset...])
        flows[index(direction)] = flow
        setReading(source(of: direction), false)
        setWaitingToWrite(sink, true)
        return .queued
    }

    /// Writes the direction's pending bytes; once all are written, the source reads again.
    private func flushPending(_ direction: Direction) {
        let sink = sink(of: direction)
        guard flushRawOutput(sink) else { return setWaitingToWrite(sink, true) }
        while flows[index(direction)].hasPending {
            let flow = flows[index(direction)]
            let written = flow.pending.withUnsafeBytes { bytes in
                SSL_write(sink.ssl, bytes.baseAddress! + flow.offset, Int32(flow.pending.count - flow.offset))  // pending: never nil
            }
            if written > 0 {
                flows[index(direction)].offset += Int(written)
                continue
            }
            let error = SSL_get_error(sink.ssl, written)
            _ = drainErrorQueue()
            guard error == SSL_ERROR_WANT_WRITE else { return writeFailed(direction) }
            return setWaitingToWrite(sink, true)
        }
        flows[index(direction)] = Flow()  // the buffer is released
        if !sink.readWaitsForWrite && !sink.closeNotifyPending { setWaitingToWrite(sink, false) }
        let source = source(of: direction)
        guard !source.readWaitsForWrite else { return }  // its own write event resumes it
        setReading(source, true)
        pump(direction)
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
                setWaitingToWrite(side, true)
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
        let source = source(of: direction)
        let error = SSL_get_error(source.ssl, result)
        switch error {
        case SSL_ERROR_WANT_READ:
            _ = drainErrorQueue()
            if source.readsBufferedInput {
                // The bytes buffered before the relay are used up (a partial record stays in
                // the SSL): the socket from now on. SSL_set0_rbio frees the memory BIO.
                source.readsBufferedInput = false
                SSL_set0_rbio(source.ssl, BIO_new_socket(source.socket, BIO_NOCLOSE))
                pump(direction)
            } else {
                // An idle connection holds no read buffer (OpenSSL keeps the one it allocated
                // for a read that found nothing).
                SSL_free_buffers(source.ssl)
            }
        case SSL_ERROR_WANT_WRITE:
            // The SSL must answer something (a TLS 1.3 KeyUpdate) and the socket is full.
            _ = drainErrorQueue()
            source.readWaitsForWrite = true
            setReading(source, false)
            setWaitingToWrite(source, true)
        default:
            // close_notify, the end of the stream, or a broken connection: the direction ends.
            _ = drainErrorQueue()
            flows[index(direction)].ended = true
            setReading(source, false)
            report(.ended(direction))
        }
    }

    private func writeFailed(_ direction: Direction) {
        setReading(source(of: direction), false)
        report(.writeFailed(direction))
    }

    private func reportRenegotiation() {
        _ = drainErrorQueue()
        setReading(upstream, false)
        guard !renegotiationReported else { return }
        renegotiationReported = true
        report(.renegotiationAttempted)
    }

    private func report(_ event: Event) {
        onEvent?(event)
    }

    // MARK: Control

    /// Tells the direction's sink that nothing more comes (TLS close_notify); the other
    /// direction goes on.
    public func shutdownWrite(_ direction: Direction) {
        let sink = sink(of: direction)
        guard !isClosed, !sink.closeNotifySent, !sink.closeNotifyPending else { return }
        clearStaleErrors()
        sink.closeNotifyPending = true
        guard flushRawOutput(sink) else { return }
        sendCloseNotify(sink)
    }

    /// Sends (or, once queued, sends on) the side's close_notify. SSL_shutdown is called again
    /// only while the alert waits in the SSL: a further call would wait for the peer's.
    private func sendCloseNotify(_ side: Side) {
        side.closeNotifyPending = false
        let result = SSL_shutdown(side.ssl)
        let error = result < 0 ? SSL_get_error(side.ssl, result) : SSL_ERROR_NONE
        _ = drainErrorQueue()
        if error == SSL_ERROR_WANT_WRITE {
            // Queued in the SSL; the next SSL_shutdown sends it (and only that).
            side.closeNotifyPending = true
            setWaitingToWrite(side, true)
        } else {
            side.closeNotifySent = true
        }
    }

    /// Frees both connections: each gets a close_notify if it has not had one (best effort:
    /// the socket is not waited for), then the SSLs are freed and the sockets closed.
    public func close() {
        guard !isClosed else { return }
        isClosed = true
        onEvent = nil
        for side in [client, upstream] {
            if let event = side.readEvent { event_free(event) }
            if let event = side.writeEvent { event_free(event) }
            side.readEvent = nil
            side.writeEvent = nil
            _ = SSL_ctrl(side.ssl, SSL_CTRL_SET_MSG_CALLBACK_ARG, 0, nil)
            SSL_set_msg_callback(side.ssl, nil)
            if !side.closeNotifySent && !side.closeNotifyPending { _ = SSL_shutdown(side.ssl) }
            _ = drainErrorQueue()
            if side.holdsSessionSlot { releaseSessionSlot(side.ssl) }
            SSL_free(side.ssl)
            closeSocket(side.socket)
        }
        flows = [Flow(), Flow()]
    }

    // MARK: Helpers

    private func index(_ direction: Direction) -> Int { direction == .up ? 0 : 1 }

    private func source(of direction: Direction) -> Side { direction == .up ? client : upstream }

    private func sink(of direction: Direction) -> Side { direction == .up ? upstream : client }

    private func setReading(_ side: Side, _ reading: Bool) {
        guard side.isReading != reading, let event = side.readEvent else { return }
        side.isReading = reading
        if reading { event_add(event, nil) } else { event_del(event) }
    }

    private func setWaitingToWrite(_ side: Side, _ waiting: Bool) {
        guard side.isWaitingToWrite != waiting, let event = side.writeEvent else { return }
        side.isWaitingToWrite = waiting
        if waiting { event_add(event, nil) } else { event_del(event) }
    }
}

extension EventLoop {
    /// The size of `relayScratch`: one TLS record's plaintext.
    static let relayScratchBytes = 16 * 1024
}
