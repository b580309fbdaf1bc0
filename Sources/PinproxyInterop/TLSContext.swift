import Glibc
import FoundationEssentials
import COpenSSL
import CPinproxyShims
import PinproxyCore

/// SSL_OP_NO_RENEGOTIATION: TLS 1.2 renegotiation refused.
private let noRenegotiation = pp_SSL_OP_NO_RENEGOTIATION()

extension TLSProtocolVersion {
    var openSSLValue: Int32 { self == .tls12 ? TLS1_2_VERSION : TLS1_3_VERSION }
}

/// Sets SSL_MODE_* flags on a context, once, for every SSL made from it. With
/// SSL_MODE_RELEASE_BUFFERS an idle connection holds no read or write buffer (about 34 KiB each).
private func setModes(_ context: OpaquePointer, _ modes: UInt32) {
    _ = SSL_CTX_ctrl(context, SSL_CTRL_MODE, Int(modes), nil)
}

/// TLS 1.3 cipher suites, AES-128-GCM first: its key schedule hashes with SHA-256 (which this
/// CPU class does in hardware) instead of SHA-384, and it encrypts faster than
/// AES-256-GCM. All three are TLS 1.3's standard suites; none is weak.
private let tls13CipherSuites = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"

/// The client-side SSL_CTX for upstream connections. It does not verify certificates: the
/// verdict does, on the chain the handshake delivered, before a single byte is relayed.
public final class TLSClientContext: @unchecked Sendable {
    let handle: OpaquePointer

    public init() throws {
        guard let handle = SSL_CTX_new(TLS_client_method()) else { throw OpenSSLError.drain("SSL_CTX_new") }
        self.handle = handle
        SSL_CTX_set_verify(handle, SSL_VERIFY_NONE, nil)
        _ = pp_SSL_CTX_set_min_proto_version(handle, TLS1_2_VERSION)
        // A TLS 1.2 server could otherwise renegotiate, after the verdict, to a certificate the
        // verdict never saw. A HelloRequest is answered with a no_renegotiation alert (and
        // reported: see `BufferEvent.connectTLS`).
        _ = SSL_CTX_set_options(handle, noRenegotiation)
        _ = pp_SSL_CTX_set_session_cache_mode(handle, Int(SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE))
        pp_SSL_CTX_sess_set_new_cb(handle, newSessionCallback)
        setModes(handle, SSL_MODE_RELEASE_BUFFERS)
        guard SSL_CTX_set_ciphersuites(handle, tls13CipherSuites) == 1 else { throw OpenSSLError.drain("SSL_CTX_set_ciphersuites") }
    }

    deinit {
        SSL_CTX_free(handle)
    }

    /// A new SSL for one upstream connection, offering `alpn`. It holds no client certificate:
    /// one is installed only when the server asks for it and has been judged
    /// (`ClientCertificateGate`).
    func makeSSL(serverName: String?, minimumVersion: TLSProtocolVersion, requestOCSPStaple: Bool, requestSCTs: Bool, alpn: ALPNOffer,
                 resumption: SessionSlot?) throws -> OpaquePointer {
        guard let ssl = SSL_new(handle) else { throw OpenSSLError.drain("SSL_new") }
        let wire = alpn.wire
        guard SSL_set_alpn_protos(ssl, wire, UInt32(wire.count)) == 0 else {
            SSL_free(ssl)
            throw OpenSSLError.drain("SSL_set_alpn_protos")
        }
        _ = pp_SSL_set_min_proto_version(ssl, minimumVersion.openSSLValue)
        if let serverName { _ = pp_SSL_set_tlsext_host_name(ssl, serverName) }
        if requestOCSPStaple { _ = pp_SSL_set_tlsext_status_type_ocsp(ssl) }
        // The SCT extension, and status_request (OpenSSL adds it with CT): SCTs come in both.
        if requestSCTs { _ = pp_SSL_request_scts(ssl) }
        if let resumption {
            // The connection resumes from its own copy: OpenSSL marks the session a connection
            // resumed from as not resumable when a new ticket arrives (and writes to it during
            // the handshake), which must not happen to the one every connection to this host
            // shares — or the connections already on their way would all fall back to full
            // handshakes.
            if let stored = resumption.cache.value(for: resumption.key), let copy = SSL_SESSION_dup(stored.handle) {
                _ = SSL_set_session(ssl, copy)
                SSL_SESSION_free(copy)
            }
            _ = pp_SSL_set_app_data(ssl, Unmanaged.passRetained(resumption).toOpaque())
        }
        return ssl
    }
}

/// The server-side SSL_CTX that terminates clients' TLS with minted leaves. ALPN selects the
/// protocol the upstream negotiated, or nothing; a ClientHello whose SNI names another host
/// than the one the connection is for fails with an unrecognized_name alert (`ClientHelloTerms`).
public final class TLSServerContext: @unchecked Sendable {
    let handle: OpaquePointer

    public init() throws {
        guard let handle = SSL_CTX_new(TLS_server_method()) else { throw OpenSSLError.drain("SSL_CTX_new") }
        self.handle = handle
        _ = pp_SSL_CTX_set_min_proto_version(handle, TLS1_2_VERSION)
        _ = SSL_CTX_set_options(handle, noRenegotiation)  // clients get no second handshake either
        ClientHelloTerms.install(on: handle)
        // The minted leaf is sent alone (clients trust the local CA itself): no chain building
        // from an empty store on every handshake.
        setModes(handle, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_NO_AUTO_CHAIN)
        guard SSL_CTX_set_ciphersuites(handle, tls13CipherSuites) == 1 else { throw OpenSSLError.drain("SSL_CTX_set_ciphersuites") }
        _ = SSL_CTX_set_options(handle, pp_SSL_OP_CIPHER_SERVER_PREFERENCE())
        // One session ticket per handshake instead of two: a client that resumes gets a new
        // one each time, and a client that does not resume costs one ticket less.
        _ = SSL_CTX_set_num_tickets(handle, 1)
    }

    deinit {
        SSL_CTX_free(handle)
    }

    /// A new SSL presenting `certificate` (with `key`) to one client, which must send no SNI
    /// or `serverName`, and gets the first of `applicationProtocols` that it offers.
    func makeSSL(certificate: Certificate, key: PrivateKey, serverName: String?,
                 applicationProtocols: [ALPNProtocol]) throws -> OpaquePointer {
        guard let ssl = SSL_new(handle) else { throw OpenSSLError.drain("SSL_new") }
        let terms = ClientHelloTerms(serverName: serverName, applicationProtocols: applicationProtocols)
        guard SSL_use_certificate(ssl, certificate.handle) == 1, SSL_use_PrivateKey(ssl, key.handle) == 1,
              terms.attach(to: ssl) else {
            SSL_free(ssl)
            throw OpenSSLError.drain("preparing the client-side TLS")
        }
        return ssl
    }
}
