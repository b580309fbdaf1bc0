/// Why a TLS handshake failed.
public struct TLSFailure: Sendable, CustomStringConvertible {
    public let messages: [String]
    /// The peers share no protocol version (or the server chose one below the minimum).
    public let isProtocolVersionMismatch: Bool

    package init(messages: [String], isProtocolVersionMismatch: Bool) {
        self.messages = messages
        self.isProtocolVersionMismatch = isProtocolVersionMismatch
    }

    public var description: String {
        messages.isEmpty ? "the connection closed during the handshake" : messages.joined(separator: "; ")
    }
}
