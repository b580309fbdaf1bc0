import COpenSSL
import CLibevent
import CPinproxyShims
import PinproxyCore

/// A buffer event's TLS: the client and server handshakes, and what a finished handshake tells.
extension BufferEvent {
    /// Starts a TLS client handshake on a connected socket, which the buffer event then owns.
    /// The event callback reports `.connected` once the handshake completes.
    /// With `sessions` and `sessionKey`, a cached session is offered for resumption, and the
    /// sessions of this connection are cached once `admitSession` is called. `clientIdentity` is
    /// never installed up front: when the server asks for a client certificate, it is presented
    /// only if `onClientCertificateRequest` answers `.present` (`ClientCertificateGate`).
    /// Renegotiation is refused (the context sets SSL_OP_NO_RENEGOTIATION); a server that asks
    /// for it sets `renegotiationAttempted` and calls `onRenegotiationAttempt`.
    public static func connectTLS(loop: EventLoop, socket: Int32, context: TLSClientContext, serverName: String?,
                                  minimumVersion: TLSProtocolVersion, requestOCSPStaple: Bool, requestSCTs: Bool = false, alpn: ALPNOffer,
                                  clientIdentity: TLSClientIdentity? = nil,
                                  sessions: TLSSessionCache? = nil, sessionKey: String? = nil) throws -> BufferEvent {
        let slot = sessions.flatMap { cache in sessionKey.map { SessionSlot(cache: cache, key: $0) } }
        let ssl: OpaquePointer
        do {
            ssl = try context.makeSSL(serverName: serverName, minimumVersion: minimumVersion, requestOCSPStaple: requestOCSPStaple,
                                      requestSCTs: requestSCTs, alpn: alpn, resumption: slot)
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
        if let clientIdentity { ClientCertificateGate.install(on: ssl, identity: clientIdentity, for: connection) }
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

    /// The SCTs the server sent in the TLS extension (asked for with `requestSCTs`); none on a
    /// resumed session.
    public var tlsExtensionSCTs: [[UInt8]] {
        guard let ssl else { return [] }
        return SignedCertificateTimestamps.tlsExtension(of: ssl)
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

extension TLSFailure {
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
