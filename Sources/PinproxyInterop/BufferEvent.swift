import Glibc
import Foundation
import COpenSSL
import CLibevent
import CPinproxyShims

/// A libevent bufferevent: a socket (plain or TLS) with input and output buffers and
/// callbacks on its loop. Owns the bufferevent (and through it the socket and SSL); `close`
/// frees it once.
public final class BufferEvent {
    /// What an event callback reports.
    public struct Events: OptionSet, Sendable {
        public let rawValue: Int16
        public init(rawValue: Int16) { self.rawValue = rawValue }
        public static let reading = Events(rawValue: Int16(BEV_EVENT_READING))
        public static let writing = Events(rawValue: Int16(BEV_EVENT_WRITING))
        public static let eof = Events(rawValue: Int16(BEV_EVENT_EOF))
        public static let error = Events(rawValue: Int16(BEV_EVENT_ERROR))
        public static let timeout = Events(rawValue: Int16(BEV_EVENT_TIMEOUT))
        public static let connected = Events(rawValue: Int16(BEV_EVENT_CONNECTED))
    }

    /// The result of asking for one line of the input.
    public enum Line {
        case line(String)
        case incomplete
        case tooLong
        case notText
    }

    private var handle: OpaquePointer?
    private let isTLS: Bool
    private let loop: EventLoop
    /// For a TLS filter: the plain buffer event underneath, which outlives the filter until
    /// the last encrypted bytes have left its buffer.
    private var underlying: BufferEvent?
    private var readHighWatermark = 0
    public var onRead: (() -> Void)?
    public var onWrite: (() -> Void)?
    public var onEvent: ((Events) -> Void)?

    /// How long a closing connection may go without sending any of what is still buffered.
    static let lingerTimeout: TimeInterval = 10

    private init(handle: OpaquePointer, isTLS: Bool, loop: EventLoop) {
        self.handle = handle
        self.isTLS = isTLS
        self.loop = loop
        installCallbacks()
    }

    private func installCallbacks() {
        guard let handle else { return }
        let context = Unmanaged.passUnretained(self).toOpaque()
        bufferevent_setcb(handle, { _, context in
            Unmanaged<BufferEvent>.fromOpaque(context!).takeUnretainedValue().onRead?()
        }, { _, context in
            Unmanaged<BufferEvent>.fromOpaque(context!).takeUnretainedValue().onWrite?()
        }, { _, what, context in
            Unmanaged<BufferEvent>.fromOpaque(context!).takeUnretainedValue().onEvent?(Events(rawValue: what))
        }, context)
    }

    /// Wraps an accepted or connected plain socket; the buffer event owns it.
    public convenience init(loop: EventLoop, socket: Int32) {
        guard let handle = bufferevent_socket_new(loop.base, socket, Int32(BEV_OPT_CLOSE_ON_FREE.rawValue)) else {
            fatalError("bufferevent_socket_new failed")
        }
        self.init(handle: handle, isTLS: false, loop: loop)
    }

    /// Starts a TLS client handshake on a connected socket, which the buffer event then owns.
    /// The event callback reports `.connected` once the handshake completes.
    /// With `sessions` and `sessionKey`, a cached session is offered for resumption, and the
    /// sessions of this connection are cached once `admitSession` is called.
    public static func connectTLS(loop: EventLoop, socket: Int32, context: TLSClientContext, serverName: String?,
                                  minimumVersion: TLSProtocolVersion, requestOCSPStaple: Bool,
                                  sessions: TLSSessionCache? = nil, sessionKey: String? = nil) throws -> BufferEvent {
        let slot = sessions.flatMap { cache in sessionKey.map { SessionSlot(cache: cache, key: $0) } }
        let ssl: OpaquePointer
        do {
            ssl = try context.makeSSL(serverName: serverName, minimumVersion: minimumVersion, requestOCSPStaple: requestOCSPStaple,
                                      resumption: slot)
        } catch {
            closeSocket(socket)
            throw error
        }
        guard let handle = bufferevent_openssl_socket_new(loop.base, socket, ssl, BUFFEREVENT_SSL_CONNECTING,
                                                          Int32(BEV_OPT_CLOSE_ON_FREE.rawValue)) else {
            releaseSessionSlot(ssl)
            SSL_free(ssl)
            closeSocket(socket)
            throw OpenSSLError.drain("bufferevent_openssl_socket_new")
        }
        bufferevent_openssl_set_allow_dirty_shutdown(handle, 1)
        return BufferEvent(handle: handle, isTLS: true, loop: loop)
    }

    /// Starts a TLS server handshake on top of this plain buffer event (bytes the client sent
    /// early are kept). Use only the returned object afterwards: it drives this one, and closes
    /// it once everything it encrypted has been sent.
    /// A client whose SNI names another host than `serverName` fails the handshake. The socket
    /// underneath holds at most `bufferLimit` encrypted bytes: past that, data waits in the
    /// returned object's output, where `outputLength` (and so backpressure) sees it.
    public func acceptTLS(loop: EventLoop, context: TLSServerContext, certificate: Certificate, key: PrivateKey,
                          serverName: String?, bufferLimit: Int) throws -> BufferEvent {
        guard let plain = handle else { throw OpenSSLError(operation: "the connection is closed", messages: []) }
        let ssl = try context.makeSSL(certificate: certificate, key: key, serverName: serverName)
        // Without BEV_OPT_CLOSE_ON_FREE: freeing the filter leaves the plain buffer event (and
        // the bytes still in its output) to this object's `linger`.
        guard let filter = bufferevent_openssl_filter_new(loop.base, plain, ssl, BUFFEREVENT_SSL_ACCEPTING, 0) else {
            SSL_free(ssl)
            throw OpenSSLError.drain("bufferevent_openssl_filter_new")
        }
        bufferevent_openssl_set_allow_dirty_shutdown(filter, 1)
        bufferevent_setwatermark(plain, Int16(EV_WRITE), 0, bufferLimit)
        // Encrypted records leave in as few writes as the buffer allows: libevent's default of
        // 16 KiB per write splits every full record (16 KiB + 22 bytes) in two.
        _ = bufferevent_set_max_single_write(plain, bufferLimit)
        // The filter has replaced this buffer event's callbacks.
        onRead = nil
        onWrite = nil
        onEvent = nil
        let tls = BufferEvent(handle: filter, isTLS: true, loop: loop)
        tls.underlying = self
        return tls
    }

    deinit {
        close()
    }

    /// Frees the buffer event and closes its socket. A TLS connection first sends close_notify;
    /// a TLS filter's socket stays open until its last bytes are sent (at most `lingerTimeout`).
    public func close() {
        guard let handle else { return }
        self.handle = nil
        onRead = nil
        onWrite = nil
        onEvent = nil
        var filterSSL: OpaquePointer?
        if isTLS, let ssl = bufferevent_openssl_get_ssl(handle) {
            if SSL_is_init_finished(ssl) == 1 { _ = SSL_shutdown(ssl) }
            if underlying == nil { releaseSessionSlot(ssl) } else { filterSSL = ssl }
            _ = drainErrorQueue()
        }
        bufferevent_free(handle)
        if let filterSSL {
            // libevent frees a filter's SSL only with BEV_OPT_CLOSE_ON_FREE, which this filter
            // lacks (see `acceptTLS`). Freed on the loop's next pass, when libevent has surely
            // finished with the filter.
            let owned = OwnedSSL(pointer: filterSSL)
            loop.post { SSL_free(owned.pointer) }
        }
        if let underlying {
            self.underlying = nil
            underlying.linger()
        }
    }

    /// Sends what is left in the output, then closes: as long as the peer keeps reading, and
    /// at most `lingerTimeout` without progress. The pending callbacks keep this object alive.
    private func linger() {
        guard handle != nil else { return }
        installCallbacks()
        setReading(false)
        guard outputLength > 0 else { return close() }
        var watchdog: Timer?
        var lastLength = outputLength
        var lastProgress = loop.now
        // The watchdog's closure holds the variable that holds the watchdog: emptying it breaks
        // that cycle, which would otherwise keep the timer and this object alive for good.
        func finish() {
            watchdog?.cancel()
            watchdog = nil
            close()
        }
        setWriteLowWatermark(0)
        onWrite = { [self] in
            if outputLength == 0 { finish() }
        }
        onEvent = { _ in finish() }
        watchdog = Timer(loop: loop, after: 1, repeats: true) { [self] in
            let length = outputLength
            if length < lastLength {
                lastLength = length
                lastProgress = loop.now
            } else if loop.now - lastProgress >= Self.lingerTimeout {
                finish()
            }
        }
        bufferevent_enable(handle, Int16(EV_WRITE))
    }

    /// Tells the peer this side sends nothing more (TLS close_notify); reading goes on until the
    /// peer ends too. No-op before the handshake has finished.
    public func shutdownWrite() {
        guard let handle, isTLS, let ssl = bufferevent_openssl_get_ssl(handle), SSL_is_init_finished(ssl) == 1 else { return }
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

    /// Moves everything in this input to `other`'s output; returns the byte count.
    @discardableResult
    public func moveInput(to other: BufferEvent) -> Int {
        guard let handle, let target = other.handle else { return 0 }
        let input = bufferevent_get_input(handle)
        let count = evbuffer_get_length(input)
        if count > 0 { evbuffer_add_buffer(bufferevent_get_output(target), input) }
        return count
    }

    /// Discards unread input.
    public func discardInput() {
        guard let handle else { return }
        let input = bufferevent_get_input(handle)
        evbuffer_drain(input, evbuffer_get_length(input))
    }

    // MARK: TLS state

    private var ssl: OpaquePointer? { handle.flatMap { bufferevent_openssl_get_ssl($0) } }

    /// The certificates the peer presented, leaf first.
    public var peerCertificateChain: [Certificate] {
        guard let ssl, let stack = SSL_get_peer_cert_chain(ssl) else { return [] }
        var chain: [Certificate] = []
        for index in 0..<pp_sk_X509_num(stack) {
            if let cert = pp_sk_X509_value(stack, index) { chain.append(Certificate(retaining: cert)) }
        }
        return chain
    }

    /// The OCSP response the server stapled, if any.
    public var ocspStaple: [UInt8]? {
        guard let ssl else { return nil }
        var bytes: UnsafePointer<UInt8>?
        let length = pp_SSL_get_tlsext_status_ocsp_resp(ssl, &bytes)
        guard length > 0, let bytes else { return nil }
        return Array(UnsafeBufferPointer(start: bytes, count: length))
    }

    /// Whether the upstream handshake resumed a cached session (no certificate was re-sent; the
    /// chain is the one stored with the session, which the verdict evaluates again).
    public var sessionReused: Bool {
        guard let ssl else { return false }
        return SSL_session_reused(ssl) == 1
    }

    /// Marks this upstream connection as admitted by the verdict: its current session and any
    /// ticket that arrives later are cached for resumption.
    public func admitSession() {
        guard let ssl, let data = pp_SSL_get_app_data(ssl) else { return }
        let slot = Unmanaged<SessionSlot>.fromOpaque(data).takeUnretainedValue()
        slot.admitted = true
        if let session = SSL_get1_session(ssl), !slot.offer(session) { SSL_SESSION_free(session) }
    }

    /// The SNI the client sent (server side).
    public var requestedServerName: String? {
        guard let ssl, let name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name) else { return nil }
        return String(cString: name)
    }

    /// The OpenSSL errors behind the last TLS failure on this connection.
    public func takeTLSErrors() -> TLSFailure {
        var messages: [String] = []
        var versionMismatch = false
        if let handle {
            while true {
                let code = bufferevent_get_openssl_error(handle)
                if code == 0 { break }
                if pp_is_protocol_version_error(code) == 1 { versionMismatch = true }
                var buffer = [CChar](repeating: 0, count: 256)
                ERR_error_string_n(code, &buffer, buffer.count)
                messages.append(String(cString: buffer))
            }
        }
        for message in drainErrorQueue() {
            messages.append(message)
        }
        return TLSFailure(messages: messages, isProtocolVersionMismatch: versionMismatch)
    }
}

/// Why a TLS handshake failed.
public struct TLSFailure: Sendable, CustomStringConvertible {
    public let messages: [String]
    /// The peers share no protocol version (or the server chose one below the minimum).
    public let isProtocolVersionMismatch: Bool

    public var description: String {
        messages.isEmpty ? "the connection closed during the handshake" : messages.joined(separator: "; ")
    }
}

/// Releases the session slot an upstream SSL holds in its app data, once.
private func releaseSessionSlot(_ ssl: OpaquePointer) {
    guard let data = pp_SSL_get_app_data(ssl) else { return }
    _ = pp_SSL_set_app_data(ssl, nil)
    Unmanaged<SessionSlot>.fromOpaque(data).release()
}

/// An SSL handed to the loop to be freed there.
private struct OwnedSSL: @unchecked Sendable {
    let pointer: OpaquePointer
}
