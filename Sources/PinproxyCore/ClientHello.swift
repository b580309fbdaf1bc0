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

/// Where reading a client's ClientHello (left buffered for the real handshake) stands.
public enum ClientHelloProgress: Sendable {
    /// More bytes are needed.
    case incomplete
    case hello(ClientHello)
    /// Not a ClientHello that can be read (or one too large): the real handshake will fail on
    /// it, and report why.
    case unreadable
}

extension ClientHello {
    /// The first `host_name` of a server_name list (RFC 6066 §3): a type byte, a two-byte
    /// length, the name. Nil when the list is malformed or holds no host name.
    public static func serverName(inList list: [UInt8]) -> String? {
        var index = 0
        while index + 3 <= list.count {
            let type = list[index]
            let length = Int(list[index + 1]) << 8 | Int(list[index + 2])
            let name = (index + 3)..<(index + 3 + length)
            guard length > 0, name.upperBound <= list.count else { return nil }
            if type == 0 { return String(decoding: list[name], as: UTF8.self) }
            index = name.upperBound
        }
        return nil
    }
}

/// The SNI an intercepted client may send: nil, any.
public struct ExpectedServerName: Sendable {
    /// The expected SNI: lowercase ASCII, no trailing dot.
    let serverName: [UInt8]?

    public init(_ serverName: String?) {
        self.serverName = serverName.map { Array($0.lowercased().utf8) }
    }

    /// A client that sends no SNI is accepted; one that does must name the expected host
    /// (ASCII case-insensitively, one trailing dot ignored).
    public func accepts(_ sent: String?) -> Bool {
        guard let serverName, let sent else { return true }
        var name = Array(sent.utf8)
        if name.last == UInt8(ascii: ".") { name.removeLast() }
        return name.map { $0 >= 65 && $0 <= 90 ? $0 + 32 : $0 } == serverName
    }
}
