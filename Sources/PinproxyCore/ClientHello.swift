/// What pinproxy needs from a client's ClientHello before it answers it.
public struct ClientHello: Sendable {
    /// The client's ALPN offer; nil when it sent no ALPN extension.
    public let alpn: ALPNOffer?
    /// The host name of its SNI extension, as sent; nil when it sent none.
    public let serverName: String?
    /// Whether it carries `encrypted_client_hello` (0xfe0d): the name it really wants is hidden.
    public let offersEncryptedClientHello: Bool

    public init(alpn: ALPNOffer?, serverName: String?, offersEncryptedClientHello: Bool) {
        self.alpn = alpn
        self.serverName = serverName
        self.offersEncryptedClientHello = offersEncryptedClientHello
    }
}
