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
