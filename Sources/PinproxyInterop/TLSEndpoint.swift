import Glibc
import COpenSSL
import CLibevent
import CPinproxyShims
import PinproxyCore

/// A TLS connection whose handshake is done, taken out of its buffer event
/// (`BufferEvent.takeTLSEndpoint`) for the relay: the socket, the SSL, and what libevent had
/// already read or not yet sent. Once `startRelaying` is called, the SSL reads and writes the
/// socket itself, and the owner waits on the socket through `watch`. Frees the SSL and closes
/// the socket once (`close`, or when released).
public final class TLSEndpoint {
    let socket: Int32
    let ssl: OpaquePointer
    /// Application data already decrypted (waiting in the buffer event's input), until taken.
    private var plaintext: [UInt8]
    /// Encrypted bytes read from the socket that the SSL has not seen yet (a TLS filter's
    /// underlying input); the SSL reads them before the socket. Emptied once the SSL has them.
    private var encryptedInput: [UInt8]
    /// Encrypted bytes not yet sent (a TLS filter's underlying output: a session ticket);
    /// they go out before anything else. Read on every relay callback (see below).
    @usableFromInline @exclusivity(unchecked) private(set) var unsentOutput: [UInt8]
    private var unsentOutputOffset = 0
    /// Whether this end owns a session slot in the SSL's app data (upstream connections).
    let holdsSessionSlot: Bool
    private var isClosed = false
    // The properties read or changed on every relay callback: only the owner's callbacks on
    // the loop's thread touch them, and no access overlaps another, so no run-time
    // exclusivity checks on the hot path.
    /// Set by the message callback when the peer sends a HelloRequest (`watchForRenegotiation`).
    @exclusivity(unchecked) public private(set) var renegotiationRequested = false
    @exclusivity(unchecked) private var readEvent = SocketEvent()
    @exclusivity(unchecked) private var writeEvent = SocketEvent()
    @exclusivity(unchecked) private var onReadable: (() -> Void)?
    @exclusivity(unchecked) private var onWritable: (() -> Void)?
    /// Where reads decrypt to: the loop's relay scratch buffer (`EventLoop.relayScratch`). The
    /// relay holds the loop, which frees it.
    private let scratch: UnsafeMutableRawPointer

    init(loop: EventLoop, socket: Int32, ssl: OpaquePointer, plaintext: [UInt8], encryptedInput: [UInt8], encryptedOutput: [UInt8],
         holdsSessionSlot: Bool) {
        scratch = loop.relayScratch
        self.socket = socket
        self.ssl = ssl
        self.plaintext = plaintext
        self.encryptedInput = encryptedInput
        self.unsentOutput = encryptedOutput
        self.holdsSessionSlot = holdsSessionSlot
    }

    deinit {
        // Never relayed (the tunnel closed first), or the relay did not close it: freed here.
        close(sendingCloseNotify: false)
    }

    /// Whether encrypted bytes read before the hand-over wait for the SSL.
    public var hasBufferedInput: Bool { !encryptedInput.isEmpty }

    /// Whether encrypted bytes from before the hand-over still wait for the socket.
    @inlinable public var hasUnsentOutput: Bool { !unsentOutput.isEmpty }

    /// The application data decrypted before the hand-over; the endpoint keeps none of it.
    public func takePlaintext() -> [UInt8] {
        defer { plaintext = [] }
        return plaintext
    }

    /// The SSL reads from and writes to the socket itself from now on (bytes read before the
    /// hand-over first), with partial writes and `readBufferBytes` of read-ahead.
    public func startRelaying(readBufferBytes: Int) {
        _ = SSL_ctrl(ssl, SSL_CTRL_MODE, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER), nil)
        SSL_set_read_ahead(ssl, 1)
        SSL_set_default_read_buffer_len(ssl, readBufferBytes)
        // A TLS filter's SSL still has BIOs over libevent's buffers; SSL_set_bio frees them.
        let socketBIO = BIO_new_socket(socket, BIO_NOCLOSE)
        if encryptedInput.isEmpty {
            SSL_set_bio(ssl, socketBIO, socketBIO)
        } else {
            let memory = BIO_new(BIO_s_mem())
            _ = encryptedInput.withUnsafeBytes { BIO_write(memory, $0.baseAddress, Int32($0.count)) }
            _ = BIO_ctrl(memory, BIO_C_SET_BUF_MEM_EOF_RETURN, -1, nil)  // once empty: "retry", not EOF
            SSL_set_bio(ssl, memory, socketBIO)
            encryptedInput = []
        }
    }

    /// The bytes read before the hand-over are used up (a partial record stays in the SSL):
    /// the SSL reads the socket from now on. SSL_set0_rbio frees the memory BIO.
    public func readFromSocket() {
        SSL_set0_rbio(ssl, BIO_new_socket(socket, BIO_NOCLOSE))
    }

    /// A HelloRequest from the peer is refused by OpenSSL (SSL_OP_NO_RENEGOTIATION); this
    /// notices it (`renegotiationRequested`), so that nothing the peer sends after it is relayed.
    public func watchForRenegotiation() {
        SSL_set_msg_callback(ssl) { isWrite, _, contentType, message, length, _, context in
            guard isWrite == 0, contentType == SSL3_RT_HANDSHAKE, length >= 1, let message, let context,
                  message.load(as: UInt8.self) == UInt8(SSL3_MT_HELLO_REQUEST) else { return }
            Unmanaged<TLSEndpoint>.fromOpaque(context).takeUnretainedValue().renegotiationRequested = true
        }
        _ = SSL_ctrl(ssl, SSL_CTRL_SET_MSG_CALLBACK_ARG, 0, Unmanaged.passUnretained(self).toOpaque())
    }

    // MARK: Reading and writing

    /// What one read brought.
    public typealias ReadResult = TLSReadResult

    /// Decrypts at most `maxLength` bytes of application data (at most
    /// `EventLoop.relayScratchBytes`) to the start of its loop's scratch buffer, which every
    /// relay of the loop shares: they are to be written (`writeScratch`) or copied
    /// (`scratchBytes`) before the loop's next read.
    public func readIntoScratch(maxLength: Int) -> ReadResult {
        let count = SSL_read(ssl, scratch, Int32(min(maxLength, EventLoop.relayScratchBytes)))
        if count > 0 {
            if renegotiationRequested { _ = drainErrorQueue() }
            return .read(Int(count))
        }
        let error = SSL_get_error(ssl, count)
        _ = drainErrorQueue()
        switch error {
        case SSL_ERROR_WANT_READ: return .wouldBlock
        case SSL_ERROR_WANT_WRITE: return .needsWrite
        default: return .ended
        }
    }

    /// What one write did.
    public typealias WriteResult = TLSWriteResult

    /// Encrypts and sends what it can of the scratch buffer's `range` (not empty) at once.
    public func writeScratch(_ range: Range<Int>) -> WriteResult {
        write(UnsafeRawBufferPointer(start: scratch + range.lowerBound, count: range.count))
    }

    /// Encrypts and sends what it can of `bytes[offset...]` (not empty) at once.
    public func write(_ bytes: [UInt8], from offset: Int) -> WriteResult {
        bytes.withUnsafeBytes { write(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
    }

    /// A copy of the scratch buffer's `range`.
    public func scratchBytes(_ range: Range<Int>) -> [UInt8] {
        Array(UnsafeRawBufferPointer(start: scratch + range.lowerBound, count: range.count))
    }

    private func write(_ bytes: UnsafeRawBufferPointer) -> WriteResult {
        guard let start = bytes.baseAddress, !bytes.isEmpty else { return .failed }
        let written = SSL_write(ssl, start, Int32(bytes.count))
        if written > 0 { return .wrote(Int(written)) }
        let error = SSL_get_error(ssl, written)
        _ = drainErrorQueue()
        return error == SSL_ERROR_WANT_WRITE ? .full : .failed
    }

    /// Whether the SSL holds decrypted or buffered records the socket no longer shows.
    public var hasPendingInput: Bool { SSL_has_pending(ssl) == 1 }

    /// Gives the SSL's read buffer back to the allocator while the connection waits (OpenSSL
    /// keeps the one it allocated for a read that found nothing).
    public func releaseReadBuffer() {
        SSL_free_buffers(ssl)
    }

    /// Sends the encrypted bytes from before the hand-over; whether all of them have left (or
    /// the socket is gone, when the SSL's own write will fail and say so). False: the socket is
    /// full, and is watched for room from now on.
    public func flushUnsentOutput() -> Bool {
        while unsentOutputOffset < unsentOutput.count {
            let sent = unsentOutput.withUnsafeBytes { bytes in
                Glibc.send(socket, bytes.baseAddress! + unsentOutputOffset, bytes.count - unsentOutputOffset, Int32(MSG_NOSIGNAL))  // non-empty: never nil
            }
            if sent > 0 {
                unsentOutputOffset += sent
            } else if sent < 0 && (errno == EAGAIN || errno == EINTR) {
                writeEvent.set(true)
                return false
            } else {
                break
            }
        }
        unsentOutput = []
        unsentOutputOffset = 0
        return true
    }

    /// Sends (or, once queued, sends on) the close_notify; false while it waits in the SSL for
    /// the socket. Call it again only then: a further SSL_shutdown would wait for the peer's.
    public func sendCloseNotify() -> Bool {
        let result = SSL_shutdown(ssl)
        let error = result < 0 ? SSL_get_error(ssl, result) : SSL_ERROR_NONE
        _ = drainErrorQueue()
        return error != SSL_ERROR_WANT_WRITE
    }

    /// The thread's OpenSSL error queue must be empty before an SSL call for SSL_get_error to
    /// be right; pinproxy drains it after every failure, so this rarely has anything to do.
    public static func clearStaleErrors() {
        if ERR_peek_error() != 0 { ERR_clear_error() }
    }

    // MARK: Waiting on the socket

    /// Makes the socket's events on `loop`: `readable` runs while bytes are watched for and the
    /// socket has some, `writable` while room is watched for and the socket has some. Call
    /// once; both are released by `close`.
    public func prepareEvents(on loop: EventLoop, readable: @escaping () -> Void, writable: @escaping () -> Void) {
        onReadable = readable
        onWritable = writable
        let context = Unmanaged.passUnretained(self).toOpaque()
        readEvent.event = event_new(loop.base, socket, Int16(EV_READ | EV_PERSIST), { _, _, context in
            guard let context else { return }
            Unmanaged<TLSEndpoint>.fromOpaque(context).takeUnretainedValue().onReadable?()
        }, context)
        writeEvent.event = event_new(loop.base, socket, Int16(EV_WRITE | EV_PERSIST), { _, _, context in
            guard let context else { return }
            Unmanaged<TLSEndpoint>.fromOpaque(context).takeUnretainedValue().onWritable?()
        }, context)
    }

    /// Watches the socket for bytes while `readable`, and for room while `writable` or while
    /// bytes from before the hand-over wait for it (`flushUnsentOutput` found it full).
    public func watch(readable: Bool, writable: Bool) {
        readEvent.set(readable)
        writeEvent.set(writable || (!unsentOutput.isEmpty && writeEvent.isAdded))
    }

    /// Runs `readable` again on the loop's next pass (the read event is registered first:
    /// libevent does not register an event that is already active).
    public func readAgainSoon() {
        readEvent.set(true)
        if let event = readEvent.event { event_active(event, EV_READ, 0) }
    }

    // MARK: Closing

    /// Stops watching the socket, sends a close_notify if asked (best effort: the socket is not
    /// waited for), frees the SSL and closes the socket. Only the first call does anything.
    public func close(sendingCloseNotify notify: Bool) {
        guard !isClosed else { return }
        isClosed = true
        readEvent.free()
        writeEvent.free()
        onReadable = nil
        onWritable = nil
        _ = SSL_ctrl(ssl, SSL_CTRL_SET_MSG_CALLBACK_ARG, 0, nil)
        SSL_set_msg_callback(ssl, nil)
        if notify { _ = SSL_shutdown(ssl) }
        _ = drainErrorQueue()
        if holdsSessionSlot { releaseSessionSlot(ssl) }
        SSL_free(ssl)
        closeSocket(socket)
    }
}

/// A libevent event of an endpoint's socket and whether it is registered.
private struct SocketEvent {
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
