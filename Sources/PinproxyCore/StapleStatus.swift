import FoundationEssentials

/// What a stapled OCSP response says about a certificate.
public enum StapleStatus: Sendable, Equatable {
    /// Signed by the issuer, current at the evaluation time, status good.
    case good
    /// Signed by the issuer, current, status revoked.
    case revoked(since: Date?)
    /// No usable answer: not parseable, not signed by the issuer, about another certificate,
    /// out of date, or status unknown. The text says which.
    case unusable(String)
}

/// What a stapled OCSP response signed by the leaf's issuer says, as Interop reads it
/// (`OCSPStaple.read`), before Policy judges it at the evaluation time (`OCSPStaple.check`).
public enum StapleReading: Sendable, Equatable {
    /// The response answers for the certificate with `status`, valid from `thisUpdate` to
    /// `nextUpdate` (each nil when absent or unreadable).
    case answer(status: Status, thisUpdate: Date?, nextUpdate: Date?)
    /// Not parseable, not signed by the issuer, or about another certificate. The text says which.
    case unusable(String)

    /// The certificate's status in the response.
    public enum Status: Sendable, Equatable {
        case good
        case revoked(since: Date?)
        case unknown
    }
}
