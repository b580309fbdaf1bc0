import COpenSSL
import CLibevent
import CPinproxyShims

/// Handing a TLS connection over to the relay (`TLSEndpoint`).
extension BufferEvent {
    /// Hands this TLS connection, its handshake done, to the relay: the socket, the SSL, and
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
        ClientCertificateGate.remove(from: ssl, of: self)
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
        return TLSEndpoint(loop: loop, socket: socket, ssl: ssl, plaintext: plaintext, encryptedInput: encryptedInput,
                           encryptedOutput: encryptedOutput, holdsSessionSlot: plain == nil)
    }

    private static func removeAll(from buffer: OpaquePointer?) -> [UInt8] {
        guard let buffer else { return [] }
        let count = evbuffer_get_length(buffer)
        guard count > 0 else { return [] }
        var bytes = [UInt8](repeating: 0, count: count)
        _ = evbuffer_remove(buffer, &bytes, count)
        return bytes
    }
}
