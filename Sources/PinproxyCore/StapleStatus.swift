import Foundation

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
