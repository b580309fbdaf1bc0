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
    /// What this object frees itself after the buffer event (see `connectTLS` and `acceptTLS`):
    /// the SSL, and for an upstream connection the socket.
    private var ownedSSL: OpaquePointer?
    private var ownedSocket: Int32 = -1
    /// While lingering: the timer that gives up on a peer that stopped reading.
    private var lingerWatchdog: Timer?
    /// Set once the peer asked for a second handshake (a TLS 1.2 HelloRequest), which is refused.
    public private(set) var renegotiationAttempted = false
    /// Set once an upstream asked for a client certificate (CertificateRequest).
    public private(set) var clientCertificateRequested = false
    /// Called on the loop's next pass after a refused renegotiation request.
    public var onRenegotiationAttempt: (() -> Void)?
    private var renegotiationNotice: Timer?
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
            guard let context else { return }
            Unmanaged<BufferEvent>.fromOpaque(context).takeUnretainedValue().onRead?()
        }, { _, context in
            guard let context else { return }
            Unmanaged<BufferEvent>.fromOpaque(context).takeUnretainedValue().onWrite?()
        }, { _, what, context in
            guard let context else { return }
            Unmanaged<BufferEvent>.fromOpaque(context).takeUnretainedValue().onEvent?(Events(rawValue: what))
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

    /// Starts a TLS client handshake on a connected socket, which the buffer event then owns.
    /// The event callback reports `.connected` once the handshake completes.
    /// With `sessions` and `sessionKey`, a cached session is offered for resumption, and the
    /// sessions of this connection are cached once `admitSession` is called. `clientIdentity` is
    /// presented if the server asks for a client certificate.
    /// Renegotiation is refused (the context sets SSL_OP_NO_RENEGOTIATION); a server that asks
    /// for it sets `renegotiationAttempted` and calls `onRenegotiationAttempt`.
    public static func connectTLS(loop: EventLoop, socket: Int32, context: TLSClientContext, serverName: String?,
                                  minimumVersion: TLSProtocolVersion, requestOCSPStaple: Bool, alpn: ALPNOffer,
                                  clientIdentity: TLSClientIdentity? = nil,
                                  sessions: TLSSessionCache? = nil, sessionKey: String? = nil) throws -> BufferEvent {
        let slot = sessions.flatMap { cache in sessionKey.map { SessionSlot(cache: cache, key: $0) } }
        let ssl: OpaquePointer
        do {
            ssl = try context.makeSSL(serverName: serverName, minimumVersion: minimumVersion, requestOCSPStaple: requestOCSPStaple,
                                      alpn: alpn, clientIdentity: clientIdentity, resumption: slot)
        } catch {
            closeSocket(socket)
            throw error
        }
        // Without BEV_OPT_CLOSE_ON_FREE, this object owns the SSL and the socket whatever
        // happens: with it, a failure after libevent has taken the SSL frees the SSL and closes
        // the socket inside libevent (2.1.9+), and an earlier failure frees neither, so the
        // caller could not know what is left to free.
        guard let handle = bufferevent_openssl_socket_new(loop.base, socket, ssl, BUFFEREVENT_SSL_CONNECTING, 0) else {
            releaseSessionSlot(ssl)
            SSL_free(ssl)
            closeSocket(socket)
            throw OpenSSLError.drain("bufferevent_openssl_socket_new")
        }
        bufferevent_openssl_set_allow_dirty_shutdown(handle, 1)
        let connection = BufferEvent(handle: handle, isTLS: true, loop: loop)
        connection.ownedSSL = ssl
        connection.ownedSocket = socket
        // A HelloRequest means the server wants a new handshake (one during the first handshake
        // is meaningless, and treated alike). OpenSSL is already processing it when this runs,
        // so SSL_is_init_finished cannot tell the two apart.
        SSL_set_msg_callback(ssl) { isWrite, _, contentType, message, length, _, context in
            guard isWrite == 0, contentType == SSL3_RT_HANDSHAKE, length >= 1, let message, let context else { return }
            switch message.load(as: UInt8.self) {
            case UInt8(SSL3_MT_HELLO_REQUEST): Unmanaged<BufferEvent>.fromOpaque(context).takeUnretainedValue().renegotiationRequested()
            case UInt8(SSL3_MT_CERTIFICATE_REQUEST): Unmanaged<BufferEvent>.fromOpaque(context).takeUnretainedValue().clientCertificateRequested = true
            default: break
            }
        }
        _ = SSL_ctrl(ssl, SSL_CTRL_SET_MSG_CALLBACK_ARG, 0, Unmanaged.passUnretained(connection).toOpaque())
        return connection
    }

    /// Runs inside OpenSSL (during a read): only records the request, and tells the owner on
    /// the loop's next pass.
    private func renegotiationRequested() {
        renegotiationAttempted = true
        guard renegotiationNotice == nil else { return }
        renegotiationNotice = Timer(loop: loop, after: 0) { [weak self] in self?.onRenegotiationAttempt?() }
    }

    /// Starts a TLS server handshake on top of this plain buffer event (bytes the client sent
    /// early are kept). Use only the returned object afterwards: it drives this one, and closes
    /// it once everything it encrypted has been sent.
    /// A client whose SNI names another host than `serverName` fails the handshake; a client
    /// gets the first of `applicationProtocols` that it offers (none of them: no ALPN). The socket underneath
    /// holds at most `bufferLimit` encrypted bytes: past that, data waits in the returned
    /// object's output, where `outputLength` (and so backpressure) sees it.
    public func acceptTLS(loop: EventLoop, context: TLSServerContext, certificate: Certificate, key: PrivateKey,
                          serverName: String?, applicationProtocols: [ALPNProtocol], bufferLimit: Int) throws -> BufferEvent {
        guard let plain = handle else { throw OpenSSLError(operation: "the connection is closed", messages: []) }
        let ssl = try context.makeSSL(certificate: certificate, key: key, serverName: serverName,
                                      applicationProtocols: applicationProtocols)
        // Without BEV_OPT_CLOSE_ON_FREE: freeing the filter leaves the plain buffer event (and
        // the bytes still in its output) to this object's `linger`.
        guard let filter = bufferevent_openssl_filter_new(loop.base, plain, ssl, BUFFEREVENT_SSL_ACCEPTING, 0) else {
            // Without BEV_OPT_CLOSE_ON_FREE, libevent never frees the SSL, even on failure.
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
        tls.ownedSSL = ssl
        return tls
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

    /// Hands this TLS connection, its handshake done, to a `TLSRelay`: the socket, the SSL, and
    /// what libevent had read but not delivered (plaintext, and for a TLS filter encrypted bytes
    /// the SSL has not seen) or not yet sent. The buffer events are freed and this object is
    /// closed. Call it outside libevent's callbacks for this buffer event (from `EventLoop.post`).
    public func takeTLSEndpoint() -> TLSEndpoint? {
        guard let handle, let ssl = ownedSSL else { return nil }
        let plaintext = Self.removeAll(from: bufferevent_get_input(handle))
        var socket = ownedSocket
        var encryptedInput: [UInt8] = []
        var encryptedOutput: [UInt8] = []
        let plain = underlying?.handle
        if let plain {
            encryptedInput = Self.removeAll(from: bufferevent_get_input(plain))
            encryptedOutput = Self.removeAll(from: bufferevent_get_output(plain))
            socket = bufferevent_getfd(plain)
            // The plain buffer event closes its socket when freed (BEV_OPT_CLOSE_ON_FREE),
            // unless it no longer has one.
            _ = bufferevent_setfd(plain, -1)
            // The filter's BIOs read and write libevent's buffers; the relay gives the SSL its
            // socket instead.
            SSL_set_bio(ssl, nil, nil)
        }
        _ = SSL_ctrl(ssl, SSL_CTRL_SET_MSG_CALLBACK_ARG, 0, nil)
        SSL_set_msg_callback(ssl, nil)
        forgetHandle()
        ownedSSL = nil
        ownedSocket = -1
        // Neither frees the SSL or closes the socket: the filter and the upstream's buffer
        // event were made without BEV_OPT_CLOSE_ON_FREE, and the plain one has no socket now.
        bufferevent_free(handle)
        if let underlying, let plain {
            underlying.forgetHandle()
            bufferevent_free(plain)
        }
        underlying = nil
        return TLSEndpoint(socket: socket, ssl: ssl, plaintext: plaintext, encryptedInput: encryptedInput,
                           encryptedOutput: encryptedOutput, holdsSessionSlot: plain == nil)
    }

    /// Drops the buffer event (the caller frees it) and every callback that could reach this object.
    private func forgetHandle() {
        handle = nil
        onRead = nil
        onWrite = nil
        onEvent = nil
        onRenegotiationAttempt = nil
        renegotiationNotice = nil
    }

    private static func removeAll(from buffer: OpaquePointer?) -> [UInt8] {
        guard let buffer else { return [] }
        let count = evbuffer_get_length(buffer)
        guard count > 0 else { return [] }
        var bytes = [UInt8](repeating: 0, count: count)
        _ = evbuffer_remove(buffer, &bytes, count)
        return bytes
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
    private func linger() {
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

    // MARK: TLS state

    private var ssl: OpaquePointer? { handle.flatMap { bufferevent_openssl_get_ssl($0) } }

    /// The certificates the peer presented, leaf first. A resumed session's are the loop's
    /// shared objects (`PeerCertificates`); a full handshake's are its own.
    public var peerCertificateChain: [Certificate] {
        guard let ssl, let stack = SSL_get_peer_cert_chain(ssl) else { return [] }
        let resumed = SSL_session_reused(ssl) == 1
        var chain: [Certificate] = []
        for index in 0..<pp_sk_X509_num(stack) {
            guard let cert = pp_sk_X509_value(stack, index) else { continue }
            chain.append(resumed ? loop.peerCertificates.certificate(for: cert) : Certificate(retaining: cert))
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

    /// The ALPN protocol this TLS connection negotiated, if any.
    public var selectedProtocol: ALPNProtocol? {
        guard let ssl else { return nil }
        var bytes: UnsafePointer<UInt8>?
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &bytes, &length)
        guard let bytes, length > 0 else { return nil }
        return ALPNProtocol(bytes: Array(UnsafeBufferPointer(start: bytes, count: Int(length))))
    }

    /// For an upstream connection about to be dropped: processes what the server has already
    /// sent (TLS 1.3 session tickets arrive after the handshake), so that an admitted session
    /// can be resumed by the next connection. Application data stays unread.
    public func takeSessionTickets() {
        guard let ssl, SSL_is_init_finished(ssl) == 1 else { return }
        var byte: UInt8 = 0
        _ = SSL_peek(ssl, &byte, 1)
        _ = drainErrorQueue()
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
                guard isOpenSSLErrorCode(code) else { continue }
                if TLSFailure.isProtocolVersionError(code) { versionMismatch = true }
                messages.append(errorString(code))
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

    /// OpenSSL's reasons for a handshake that found no TLS version both sides accept.
    static func isProtocolVersionError(_ code: UInt) -> Bool {
        switch pp_ERR_GET_REASON(code) {
        case SSL_R_UNSUPPORTED_PROTOCOL, SSL_R_TLSV1_ALERT_PROTOCOL_VERSION, SSL_R_NO_PROTOCOLS_AVAILABLE,
             SSL_R_WRONG_SSL_VERSION, SSL_R_VERSION_TOO_LOW:
            return true
        default:
            return false
        }
    }
}

/// Releases the session slot an upstream SSL holds in its app data, once.
func releaseSessionSlot(_ ssl: OpaquePointer) {
    guard let data = pp_SSL_get_app_data(ssl) else { return }
    _ = pp_SSL_set_app_data(ssl, nil)
    Unmanaged<SessionSlot>.fromOpaque(data).release()
}

/// An SSL and a socket handed to the loop to be freed there.
private struct OwnedTLS: @unchecked Sendable {
    let ssl: OpaquePointer?
    let socket: Int32
}
