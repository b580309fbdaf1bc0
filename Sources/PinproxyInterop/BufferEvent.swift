import Glibc
import FoundationEssentials
import COpenSSL
import CLibevent
import CPinproxyShims
import PinproxyCore

/// A libevent bufferevent: a socket (plain or TLS) with input and output buffers and
/// callbacks on its loop. Owns the bufferevent (and through it the socket and SSL); `close`
/// frees it once.
public final class BufferEvent {
    /// What an event callback reports.
    public typealias Events = EndpointEvents

    /// The result of asking for one line of the input.
    public typealias Line = BufferedLine

    var handle: OpaquePointer?
    let isTLS: Bool
    let loop: EventLoop
    /// For a TLS filter: the plain buffer event underneath, which outlives the filter until
    /// the last encrypted bytes have left its buffer.
    var underlying: BufferEvent?
    /// What this object frees itself after the buffer event (see `connectTLS` and `acceptTLS`):
    /// the SSL, and for an upstream connection the socket.
    var ownedSSL: OpaquePointer?
    var ownedSocket: Int32 = -1
    /// While lingering: the timer that gives up on a peer that stopped reading.
    private var lingerWatchdog: Timer?
    /// Set once the peer asked for a second handshake (a TLS 1.2 HelloRequest), which is refused.
    public internal(set) var renegotiationAttempted = false
    /// Set once an upstream asked for a client certificate (CertificateRequest).
    public internal(set) var clientCertificateRequested = false
    /// Called on the loop's next pass after a refused renegotiation request.
    public var onRenegotiationAttempt: (() -> Void)?
    /// Asked, inside OpenSSL, when an upstream with an identity to present asks for a client
    /// certificate: after the server's whole flight, before anything of the identity is sent
    /// (`ClientCertificateGate`). Without an answer, the identity is withheld.
    public var onClientCertificateRequest: (() -> ClientCertificateAnswer)?
    /// The context of the SSL's certificate callback, retained while it is set.
    var certificateGate: UnsafeMutableRawPointer?
    var renegotiationNotice: Timer?
    private var readHighWatermark = 0
    public var onRead: (() -> Void)?
    public var onWrite: (() -> Void)?
    public var onEvent: ((Events) -> Void)?

    /// How long a closing connection may go without sending any of what is still buffered.
    static let lingerTimeout: TimeInterval = 10

    init(handle: OpaquePointer, isTLS: Bool, loop: EventLoop) {
        self.handle = handle
        self.isTLS = isTLS
        self.loop = loop
        installCallbacks()
    }

    func installCallbacks() {
        guard let handle else { return }
        let context = Unmanaged.passUnretained(self).toOpaque()
        bufferevent_setcb(handle, { _, context in
            guard let context else { return }
            Unmanaged<BufferEvent>.fromOpaque(context).takeUnretainedValue().onRead?()
        }, { _, context in
            guard let context else { return }
            Unmanaged<BufferEvent>.fromOpaque(context).takeUnretainedValue().onWrite?()
        }, { _, what, context in
            guard let context else { return }
            Unmanaged<BufferEvent>.fromOpaque(context).takeUnretainedValue().onEvent?(Events(libevent: what))
        }, context)
    }

    /// Wraps an accepted or connected plain socket; the buffer event owns it, and closes it
    /// at once when libevent cannot make the buffer event (then this throws).
    public convenience init(loop: EventLoop, socket: Int32) throws {
        guard let handle = bufferevent_socket_new(loop.base, socket, Int32(BEV_OPT_CLOSE_ON_FREE.rawValue)) else {
            closeSocket(socket)
            throw SystemError("bufferevent_socket_new", ENOMEM)
        }
        self.init(handle: handle, isTLS: false, loop: loop)
    }

    deinit {
        close()
    }

    /// Frees the buffer event and closes its socket. A TLS connection first sends close_notify;
    /// a TLS filter's socket stays open until its last bytes are sent (at most `lingerTimeout`).
    public func close() {
        guard let handle else { return }
        forgetHandle()
        lingerWatchdog?.cancel()
        lingerWatchdog = nil
        if let ssl = ownedSSL {
            if SSL_is_init_finished(ssl) == 1 { _ = SSL_shutdown(ssl) }
            if underlying == nil { releaseSessionSlot(ssl) }
            ClientCertificateGate.remove(from: ssl, of: self)
            _ = SSL_ctrl(ssl, SSL_CTRL_SET_MSG_CALLBACK_ARG, 0, nil)
            _ = drainErrorQueue()
        }
        bufferevent_free(handle)
        if ownedSSL != nil || ownedSocket >= 0 {
            // Neither buffer event was made with BEV_OPT_CLOSE_ON_FREE (see `connectTLS` and
            // `acceptTLS`): the SSL and the socket are freed here, on the loop's next pass, when
            // libevent has surely finished with the buffer event.
            let owned = OwnedTLS(ssl: ownedSSL, socket: ownedSocket)
            ownedSSL = nil
            ownedSocket = -1
            loop.post {
                if let ssl = owned.ssl { SSL_free(ssl) }
                if owned.socket >= 0 { closeSocket(owned.socket) }
            }
        }
        if let underlying {
            self.underlying = nil
            underlying.linger()
        }
    }

    /// Drops the buffer event (the caller frees it) and every callback that could reach this object.
    func forgetHandle() {
        handle = nil
        onRead = nil
        onWrite = nil
        onEvent = nil
        onRenegotiationAttempt = nil
        onClientCertificateRequest = nil
        renegotiationNotice = nil
    }

    /// Closes at once, without lingering for bytes not yet sent: for a daemon that is stopping,
    /// whose loop will not run long enough to send them.
    public func abort() {
        let underlying = self.underlying
        self.underlying = nil
        close()
        underlying?.close()
    }

    /// Sends what is left in the output, then closes: as long as the peer keeps reading, and
    /// at most `lingerTimeout` without progress. The pending callbacks keep this object alive.
    func linger() {
        guard handle != nil else { return }
        installCallbacks()
        setReading(false)
        guard outputLength > 0 else { return close() }
        var lastLength = outputLength
        var lastProgress = loop.now
        setWriteLowWatermark(0)
        // These closures (and the watchdog's) hold this object until `close`, which releases
        // them all: nothing refers to the watchdog but this object.
        onWrite = { [self] in
            if outputLength == 0 { close() }
        }
        onEvent = { [self] _ in close() }
        lingerWatchdog = Timer(loop: loop, after: 1, repeats: true) { [self] in
            let length = outputLength
            if length < lastLength {
                lastLength = length
                lastProgress = loop.now
            } else if loop.now - lastProgress >= Self.lingerTimeout {
                close()
            }
        }
        bufferevent_enable(handle, Int16(EV_WRITE))
    }

    /// Tells the peer this side sends nothing more (TLS close_notify; on a plain socket, a TCP
    /// FIN: call it once the output is empty); reading goes on until the peer ends too. No-op
    /// on a TLS connection before its handshake has finished.
    public func shutdownWrite() {
        guard let handle else { return }
        guard isTLS else {
            _ = Glibc.shutdown(bufferevent_getfd(handle), Int32(SHUT_WR))
            return
        }
        guard let ssl = bufferevent_openssl_get_ssl(handle), SSL_is_init_finished(ssl) == 1 else { return }
        _ = SSL_shutdown(ssl)
        _ = drainErrorQueue()
    }

    /// Whether `close` has been called.
    public var isClosed: Bool { handle == nil }

    // MARK: Flow

    /// Starts or stops reading.
    public func setReading(_ enabled: Bool) {
        guard let handle else { return }
        if enabled { bufferevent_enable(handle, Int16(EV_READ)) } else { bufferevent_disable(handle, Int16(EV_READ)) }
    }

    /// Whether reading is enabled.
    public var isReading: Bool {
        guard let handle else { return false }
        return Int32(bufferevent_get_enabled(handle)) & Int32(EV_READ) != 0
    }

    /// The write callback fires when the output drains to `bytes` or fewer.
    public func setWriteLowWatermark(_ bytes: Int) {
        guard let handle else { return }
        bufferevent_setwatermark(handle, Int16(EV_WRITE), bytes, 0)
    }

    /// Reading pauses while the input holds `bytes` or more. A TLS buffer event then also reads
    /// whole records (up to 16 KiB at once) instead of 4 KiB pieces, so each relayed record
    /// goes out as one record.
    public func setReadHighWatermark(_ bytes: Int) {
        guard let handle, bytes != readHighWatermark else { return }
        readHighWatermark = bytes
        bufferevent_setwatermark(handle, Int16(EV_READ), 0, bytes)
    }

    /// Bytes queued here and not yet sent. For a TLS filter this excludes the (bounded)
    /// encrypted bytes in the socket underneath, which `close` still delivers.
    public var outputLength: Int {
        guard let handle else { return 0 }
        return evbuffer_get_length(bufferevent_get_output(handle))
    }

    /// Bytes received and not yet read.
    public var inputLength: Int {
        guard let handle else { return 0 }
        return evbuffer_get_length(bufferevent_get_input(handle))
    }

    /// Removes one line (ended by CRLF or LF) of at most `maxLength` bytes from the input.
    public func readLine(maxLength: Int) -> Line {
        guard let handle else { return .incomplete }
        let input = bufferevent_get_input(handle)
        var eolLength = 0
        let found = evbuffer_search_eol(input, nil, &eolLength, EVBUFFER_EOL_CRLF)
        guard found.pos >= 0 else {
            return evbuffer_get_length(input) > maxLength ? .tooLong : .incomplete
        }
        guard found.pos <= maxLength else { return .tooLong }
        var bytes = [UInt8](repeating: 0, count: found.pos)
        if found.pos > 0 { evbuffer_remove(input, &bytes, found.pos) }
        evbuffer_drain(input, eolLength)
        guard let text = String(validating: bytes, as: UTF8.self), text.utf8.allSatisfy({ $0 >= 0x20 && $0 != 0x7F || $0 == 0x09 }) else {
            return .notText
        }
        return .line(text)
    }

    /// Queues bytes for sending.
    public func write(_ bytes: [UInt8]) {
        guard let handle else { return }
        bufferevent_write(handle, bytes, bytes.count)
    }

    /// Removes up to `maxLength` bytes from the input and returns them.
    public func read(maxLength: Int) -> [UInt8] {
        guard let handle, maxLength > 0 else { return [] }
        let input = bufferevent_get_input(handle)
        let count = min(maxLength, evbuffer_get_length(input))
        guard count > 0 else { return [] }
        var bytes = [UInt8](repeating: 0, count: count)
        let removed = evbuffer_remove(input, &bytes, count)
        return removed > 0 ? Array(bytes.prefix(Int(removed))) : []
    }

    /// Moves everything in this input to `other`'s output; returns the byte count.
    @discardableResult
    public func moveInput(to other: BufferEvent) -> Int {
        guard let handle, let target = other.handle else { return 0 }
        let input = bufferevent_get_input(handle)
        let count = evbuffer_get_length(input)
        if count > 0 { evbuffer_add_buffer(bufferevent_get_output(target), input) }
        return count
    }

    /// Up to `maxLength` bytes of the input from `offset` on, copied (the input keeps them).
    func copyInput(from offset: Int, maxLength: Int) -> [UInt8] {
        guard let handle, maxLength > 0 else { return [] }
        let input = bufferevent_get_input(handle)
        let count = min(maxLength, evbuffer_get_length(input) - min(offset, evbuffer_get_length(input)))
        guard count > 0 else { return [] }
        var position = evbuffer_ptr()
        guard evbuffer_ptr_set(input, &position, offset, EVBUFFER_PTR_SET) == 0 else { return [] }
        var bytes = [UInt8](repeating: 0, count: count)
        let copied = evbuffer_copyout_from(input, &position, &bytes, count)
        return copied == count ? bytes : []
    }

    /// Discards unread input.
    public func discardInput() {
        guard let handle else { return }
        let input = bufferevent_get_input(handle)
        evbuffer_drain(input, evbuffer_get_length(input))
    }
}

/// An SSL and a socket handed to the loop to be freed there.
private struct OwnedTLS: @unchecked Sendable {
    let ssl: OpaquePointer?
    let socket: Int32
}

extension EndpointEvents {
    /// The flags of libevent's `what`, each by its name.
    init(libevent what: Int16) {
        let what = Int32(what)
        self = []
        if what & BEV_EVENT_READING != 0 { insert(.reading) }
        if what & BEV_EVENT_WRITING != 0 { insert(.writing) }
        if what & BEV_EVENT_EOF != 0 { insert(.eof) }
        if what & BEV_EVENT_ERROR != 0 { insert(.error) }
        if what & BEV_EVENT_TIMEOUT != 0 { insert(.timeout) }
        if what & BEV_EVENT_CONNECTED != 0 { insert(.connected) }
    }
}
