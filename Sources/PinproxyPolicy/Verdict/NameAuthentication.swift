import FoundationEssentials
import PinproxyCore

/// Whether a connection an entry admits proves that the server is the host the client named.
/// On the transparent listener the client chooses the address (its original destination) as
/// well as the name (its SNI); an admission that proves nothing about the name would let a
/// client reach any address under the name of a host it may use, so there the address must be
/// one the name resolves to for pinproxy (`OriginalDestination.swift`). The table of every
/// kind of admission: docs/trust-decisions.md, "Which admissions authenticate the name".
public enum NameAuthentication: Sendable, Equatable {
    /// Every admission under the entry proves the name; `why` says how.
    case proven(why: String)
    /// An admission under the entry may prove nothing about the name; `why` says why (it
    /// completes "ENTRY …", as in `hosts."a.test" has action = "allow-insecure", …`).
    case unproven(why: String)

    public var isProven: Bool {
        if case .proven = self { return true }
        return false
    }

    /// How the name is proven, or why it is not.
    public var why: String {
        switch self {
        case .proven(let why), .unproven(let why): return why
        }
    }

    /// Whether `policy` authenticates the name of every connection it admits at `time`.
    /// Chain and host-name failures are never report-only (`enforce = false` relaxes pins,
    /// revocation, a custom check, host and port only), so a verified chain whose leaf must
    /// name the host proves it whatever `enforce`, `expires` or `action = "deny"` say. Without
    /// that, only a pinned leaf does: under `trust = "none"` pins match the leaf alone, and
    /// only the holder of the pinned key completes the handshake. With `validate_host = false`
    /// a pin may be a CA's key, which vouches for other names too.
    public static func of(_ policy: HostPolicy.Settings, at time: Date) -> NameAuthentication {
        if policy.mode == .tunnel {
            return .unproven(why: "has mode = \"tunnel\", and nothing verifies a tunnel's peer")
        }
        if policy.action == .allowInsecure {
            return .unproven(why: "has action = \"allow-insecure\", and no certificate check is made")
        }
        if policy.trust.store != nil && policy.validateHost {
            return .proven(why: "the chain is verified to the entry's anchors and the leaf must name the host")
        }
        if policy.trust.store != nil {
            return .unproven(why: "has validate_host = false, and its pins may match a CA's key, which vouches for other names too")
        }
        // trust = "none": the pins on the leaf are all there is.
        guard policy.pinKind != .none, !policy.pins.isEmpty else {
            return .unproven(why: "has trust = \"none\" and no pins, so nothing is checked")
        }
        guard policy.enforce else {
            return .unproven(why: "has trust = \"none\" and enforce = false, so a leaf without a pinned key is let through")
        }
        if let expiry = policy.pinsExpireAt, time >= expiry {
            return .unproven(why: "has trust = \"none\" and its pins expired on \(policy.expires ?? rfc3339(expiry)), so nothing is checked")
        }
        return .proven(why: "trust = \"none\", and only the holder of a pinned key completes the handshake")
    }
}
