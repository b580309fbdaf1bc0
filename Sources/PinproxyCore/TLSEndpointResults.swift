/// What one read of a `TLSEndpoint` brought.
public enum TLSReadResult: Equatable {
    /// This many bytes of application data.
    case read(Int)
    /// The SSL needs more bytes than its input has.
    case wouldBlock
    /// The SSL must write before it reads on (a TLS 1.3 KeyUpdate answer) and the socket is full.
    case needsWrite
    /// close_notify, the end of the stream, or a broken connection.
    case ended
}

/// What one write of a `TLSEndpoint` did.
public enum TLSWriteResult: Equatable {
    /// The SSL took this many bytes (at least one).
    case wrote(Int)
    /// The socket is full.
    case full
    /// The connection cannot be written to.
    case failed
}
