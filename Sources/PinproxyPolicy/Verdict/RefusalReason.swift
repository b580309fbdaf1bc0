/// Why pinproxy refuses a connection: the tokens clients see in `Pinproxy-Refusal`, operators
/// see in the log, and the metrics carry as their `reason` label. The verdict function decides the certificate and policy
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
    /// Certificate Transparency (`ct`): a chain to a system-store anchor without enough
    /// qualifying SCTs.
    case ctMissing = "ct-missing"
    /// The entry's `verify_command` refused a chain the built-in checks accepted.
    case customCheck = "custom-check"
    // Decided during the upstream handshake.
    case tlsVersion = "tls-version"
    // Decided by the proxy before or around the upstream connection.
    case destinationDenied = "destination-denied"
    /// A `mode = "tunnel"` connection whose destination cannot be bound to its name.
    case destinationMismatch = "destination-mismatch"
    case cleartextDenied = "cleartext-denied"
    case badRequest = "bad-request"
    /// A transparent-listener client sent no SNI, and no entry names the destination's address.
    case noSNI = "no-sni"
    /// A connection pinproxy made itself came back to its transparent listener, or one was
    /// made straight to it: nothing it could be relayed to.
    case captureLoop = "capture-loop"
    /// The client holds `max_tunnels_per_client` tunnels already.
    case clientLimit = "client-limit"
    case dnsFailure = "dns-failure"
    case upstreamUnreachable = "upstream-unreachable"
    case handshakeFailed = "handshake-failed"
    case upstreamTimeout = "upstream-timeout"

    /// Declaration order is priority order: the first failing check names the verdict.
    public static func < (lhs: RefusalReason, rhs: RefusalReason) -> Bool {
        lhs.priority < rhs.priority
    }

    /// The position in declaration order (every case is in `allCases`).
    private var priority: Int { Self.allCases.firstIndex(of: self) ?? Self.allCases.count }

    /// What pinproxy does with this reason: the one table every part of it reads. Every case
    /// states every column, so a new reason cannot fall into another's treatment, and a new
    /// column is a field of `RefusalTraits` filled in here.
    public var traits: RefusalTraits {
        switch self {
        //                                        status report policy cert  Proxy-Status error
        // client-denied: report-only under its [clients] section's own enforce, not the entry's.
        case .clientDenied:            return row(403, false, false, false, .httpRequestDenied)
        case .hostDenied:              return row(403, true,  true,  false, .httpRequestDenied)
        case .portDenied:              return row(403, true,  true,  false, .httpRequestDenied)
        case .untrustedChain:          return row(403, false, true,  true,  .tlsCertificateError)
        case .certificateExpired:      return row(403, false, true,  true,  .tlsCertificateError)
        case .certificateNotYetValid:  return row(403, false, true,  true,  .tlsCertificateError)
        case .revoked:                 return row(403, false, true,  true,  .tlsCertificateError)
        case .revocationUnknown:       return row(403, true,  true,  true,  .tlsCertificateError)
        case .hostnameMismatch:        return row(403, false, true,  true,  .tlsCertificateError)
        case .pinMismatch:             return row(403, true,  true,  true,  .tlsCertificateError)
        case .ctMissing:               return row(403, true,  true,  true,  .tlsCertificateError)
        case .customCheck:             return row(403, true,  true,  true,  .tlsCertificateError)
        case .tlsVersion:              return row(403, false, false, false, .tlsProtocolError)
        case .destinationDenied:       return row(403, false, false, false, .destinationIPProhibited)
        case .destinationMismatch:     return row(403, false, false, false, .destinationIPProhibited)
        case .cleartextDenied:         return row(403, false, false, false, .httpRequestDenied)
        case .badRequest:              return row(400, false, false, false, .httpRequestError)
        case .noSNI:                   return row(403, false, false, false, .httpRequestError)
        case .captureLoop:             return row(403, false, false, false, .proxyLoopDetected)
        case .clientLimit:             return row(429, false, false, false, .httpRequestDenied)
        case .dnsFailure:              return row(502, false, false, false, .dnsError)
        case .upstreamUnreachable:     return row(502, false, false, false, .destinationUnavailable)
        case .handshakeFailed:         return row(502, false, false, false, .tlsProtocolError)
        case .upstreamTimeout:         return row(504, false, false, false, .connectionTimeout)
        }
    }
}

/// One reason's row of the table `RefusalReason.traits`.
public struct RefusalTraits: Sendable {
    /// The HTTP status of a refusal for this reason (the CONNECT answer, or the in-TLS page).
    public let httpStatus: Int
    /// Whether `enforce = false` turns this refusal into report-only: pin-mismatch, ct-missing,
    /// revocation-unknown (soft fail), host-denied, port-denied and custom-check (the
    /// operator's own check, an addition like pins). The chain, its dates, the host name and a
    /// revocation are always enforced: behind an intercepting proxy the client has no check of
    /// its own left.
    public let mayBeReportOnly: Bool
    /// Whether the verdict decides this reason from the entry (host, port, certificate), rather
    /// than the proxy (request, destination, upstream, TLS version).
    public let isPolicyDecision: Bool
    /// Whether the certificate the server presented is why: the reasons a pin-failure report
    /// (`report_to`) is sent for.
    public let isCertificateReason: Bool
    /// The `error` of the `Proxy-Status` header (RFC 9209) a refusal for this reason carries.
    /// A DNS lookup that times out is `dns-failure` with `dns_timeout` instead.
    public let proxyStatusError: ProxyStatusError
}

/// A row of `RefusalReason.traits`, in its columns' order.
private func row(_ httpStatus: Int, _ mayBeReportOnly: Bool, _ isPolicyDecision: Bool, _ isCertificateReason: Bool,
                 _ proxyStatusError: ProxyStatusError) -> RefusalTraits {
    RefusalTraits(httpStatus: httpStatus, mayBeReportOnly: mayBeReportOnly, isPolicyDecision: isPolicyDecision,
                  isCertificateReason: isCertificateReason, proxyStatusError: proxyStatusError)
}
