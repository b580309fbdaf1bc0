/// Why pinproxy refuses a connection: the tokens clients see in `Pinproxy-Refusal` and
/// operators see in the log. The verdict function decides the certificate and policy
/// reasons; the proxy decides the request, destination and upstream ones.
public enum RefusalReason: String, Sendable, CaseIterable, Comparable {
    // Decided by `[clients]` (`ClientPolicy`) before the entry is consulted; report-only under
    // the section's own `enforce = false`.
    case clientDenied = "client-denied"
    // Decided by the verdict, in priority order for chain, host and pin checks.
    case hostDenied = "host-denied"
    case portDenied = "port-denied"
    case untrustedChain = "untrusted-chain"
    case certificateExpired = "certificate-expired"
    case certificateNotYetValid = "certificate-not-yet-valid"
    case revoked = "revoked"
    case revocationUnknown = "revocation-unknown"
    case hostnameMismatch = "hostname-mismatch"
    case pinMismatch = "pin-mismatch"
    /// The entry's `verify_command` refused a chain the built-in checks accepted.
    case customCheck = "custom-check"
    // Decided during the upstream handshake.
    case tlsVersion = "tls-version"
    // Decided by the proxy before or around the upstream connection.
    case destinationDenied = "destination-denied"
    case cleartextDenied = "cleartext-denied"
    case badRequest = "bad-request"
    case dnsFailure = "dns-failure"
    case upstreamUnreachable = "upstream-unreachable"
    case handshakeFailed = "handshake-failed"
    case upstreamTimeout = "upstream-timeout"

    /// Whether the verdict decides this reason from the entry (host, port, certificate), rather
    /// than the proxy (request, destination, upstream, TLS version).
    public var isPolicyDecision: Bool {
        switch self {
        case .hostDenied, .portDenied, .untrustedChain, .certificateExpired, .certificateNotYetValid,
             .revoked, .revocationUnknown, .hostnameMismatch, .pinMismatch, .customCheck:
            return true
        default:
            return false
        }
    }

    /// Whether the certificate the server presented is why: the reasons a pin-failure report
    /// (`report_to`) is sent for.
    public var isCertificateReason: Bool {
        switch self {
        case .untrustedChain, .certificateExpired, .certificateNotYetValid, .revoked, .revocationUnknown,
             .hostnameMismatch, .pinMismatch, .customCheck:
            return true
        default:
            return false
        }
    }

    /// Whether `enforce = false` turns this refusal into report-only: pin-mismatch,
    /// revocation-unknown (soft fail), host-denied, port-denied and custom-check (the
    /// operator's own check, an addition like pins). The chain, its dates, the
    /// host name and a revocation are always enforced: behind an intercepting proxy the client
    /// has no check of its own left.
    public var mayBeReportOnly: Bool {
        switch self {
        case .hostDenied, .portDenied, .revocationUnknown, .pinMismatch, .customCheck:
            return true
        default:
            return false
        }
    }

    /// Declaration order is priority order: the first failing check names the verdict.
    public static func < (lhs: RefusalReason, rhs: RefusalReason) -> Bool {
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }
}
