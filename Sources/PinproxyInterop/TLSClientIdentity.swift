import COpenSSL
import PinproxyCore

/// What pinproxy presents to an upstream that asks for a client certificate (mutual TLS): a
/// certificate, the chain sent with it, and the certificate's key.
public struct TLSClientIdentity: Sendable {
    public let certificate: Certificate
    /// The certificates sent after it (its issuers), in order.
    public let chain: [Certificate]
    public let key: PrivateKey

    public init(certificate: Certificate, chain: [Certificate], key: PrivateKey) {
        self.certificate = certificate
        self.chain = chain
        self.key = key
    }
}

/// Ties an upstream SSL to the identity it may present and to the connection that decides
/// whether it does: the context of OpenSSL's certificate callback (`SSL_set_cert_cb`). The SSL
/// holds one retain on it from `install` until `remove` (the connection's close or hand-over
/// to the relay); it holds the connection weakly, so a request that finds no connection
/// presents nothing.
final class ClientCertificateGate {
    let identity: TLSClientIdentity
    weak var connection: BufferEvent?

    private init(identity: TLSClientIdentity, connection: BufferEvent) {
        self.identity = identity
        self.connection = connection
    }

    /// Sets `ssl`'s certificate callback: `identity` is installed on `ssl` only when
    /// `connection` answers `.present` (never up front).
    static func install(on ssl: OpaquePointer, identity: TLSClientIdentity, for connection: BufferEvent) {
        let context = Unmanaged.passRetained(ClientCertificateGate(identity: identity, connection: connection)).toOpaque()
        connection.certificateGate = context
        SSL_set_cert_cb(ssl, certificateCallback, context)
    }

    /// Clears `ssl`'s certificate callback and releases the gate `install` retained, once.
    static func remove(from ssl: OpaquePointer, of connection: BufferEvent) {
        guard let context = connection.certificateGate else { return }
        connection.certificateGate = nil
        SSL_set_cert_cb(ssl, nil, nil)
        Unmanaged<ClientCertificateGate>.fromOpaque(context).release()
    }

    /// Puts the identity on `ssl`, for the Certificate message OpenSSL is about to send.
    func present(on ssl: OpaquePointer) -> Bool {
        // The chain certificates are added with a reference of their own (SSL_add1_chain_cert).
        SSL_use_certificate(ssl, identity.certificate.handle) == 1 && SSL_use_PrivateKey(ssl, identity.key.handle) == 1
            && identity.chain.allSatisfy { SSL_ctrl(ssl, SSL_CTRL_CHAIN_CERT, 1, UnsafeMutableRawPointer($0.handle)) == 1 }
    }
}

/// OpenSSL's certificate callback on an upstream (client) SSL. On a client it runs only for a
/// server that sent a CertificateRequest, after the server's whole flight and before the
/// client's Certificate message: after the server's Finished in TLS 1.3, after ServerHelloDone
/// (so after its certificate and staple) in TLS 1.2. It runs inside OpenSSL, during a read of
/// the buffer event: the owner's answer may change its own state, never close the connection.
/// 1 goes on (with the identity when presented, else with an empty Certificate); 0 fails the
/// handshake.
private let certificateCallback: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> Int32 = { ssl, context in
    guard let ssl, let context else { return 0 }
    let gate = Unmanaged<ClientCertificateGate>.fromOpaque(context).takeUnretainedValue()
    let answer = gate.connection?.onClientCertificateRequest?() ?? .withhold
    switch answer {
    case .present: return gate.present(on: ssl) ? 1 : 0
    case .withhold: return 1
    case .abortHandshake: return 0
    }
}
