/// How an upstream connection answers a server that asks for its client certificate
/// (`BufferEvent.onClientCertificateRequest`).
public enum ClientCertificateAnswer: Sendable {
    /// Install the identity now and send it (Certificate, then CertificateVerify).
    case present
    /// Send an empty Certificate message: the handshake goes on without the identity.
    case withhold
    /// End the handshake here with an alert: nothing more is sent.
    case abortHandshake
}
