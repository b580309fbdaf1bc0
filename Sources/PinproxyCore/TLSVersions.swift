/// TLS protocol versions pinproxy can require.
public enum TLSProtocolVersion: Sendable {
    case tls12, tls13
}

/// A protocol version a diagnosis offers alone (`BlockingTLSConnection.Version`).
public enum TLSProbeVersion: String, CaseIterable, Sendable {
    case tls13 = "TLS 1.3", tls12 = "TLS 1.2", tls11 = "TLS 1.1", tls10 = "TLS 1.0"

    /// Versions below TLS 1.2 are deprecated (RFC 8996).
    public var isDeprecated: Bool { self == .tls11 || self == .tls10 }
}
