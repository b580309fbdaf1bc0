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

    /// What an operator can do about a refusal for this reason, as the in-TLS refusal page says
    /// it ("To change the policy: ..."); nil where nothing in the policy changes it. `host`,
    /// `entry` and `config` come printable; `pinKind` is the entry's pin kind, if it pins.
    public func advice(host: String, port: UInt16, entry: String, config: String, pinKind: String?) -> String? {
        let apply = "then run `pinproxy check --config \(config)` and reload pinproxy (`systemctl reload pinproxy`, or `pinproxy reload --config \(config)`)."
        switch self {
        case .pinMismatch:
            let kind = pinKind ?? "public-key"
            return "if the server's new \(kind == "certificate" ? "certificate" : "key") is genuine (check it out of band), add its \(kind) pin from the list above to pins in \(entry) of \(config); \(apply)"
        case .untrustedChain:
            return "if this chain is genuine, list its root or intermediate in trust of \(entry) in \(config) (`pinproxy pin --connect \(host):\(port) --save-anchor FILE` writes it); \(apply)"
        case .hostnameMismatch:
            return "the certificate does not name \(host): the server must present one that does (validate_host = false in \(entry) accepts it, but then pins are all that protect it)."
        case .certificateExpired, .certificateNotYetValid:
            return "the server's certificate is outside its validity period (or this machine's clock is wrong): the server must renew it."
        case .revoked, .revocationUnknown:
            return "the server's certificate is revoked, or its revocation status is unknown: see revocation and crls in \(entry) of \(config)."
        case .ctMissing:
            return "the certificate chains to a root of the system store but lacks enough Signed Certificate Timestamps from the logs of ct_log_list in [proxy] of \(config): either it was never made public in Certificate Transparency logs, or the log list is missing its logs (replace it with a current one); ct in \(entry) sets the check; \(apply)"
        case .tlsVersion:
            return "the server does not offer the entry's min_tls: see min_tls in \(entry) of \(config)."
        case .hostDenied:
            return "add a [hosts.\"\(host)\"] entry to \(config) (or change its deny); \(apply)"
        case .clientDenied:
            return "a [clients] section of \(config) (named above) does not let this client reach \(host): add it to that section's allow, or take it out of its deny; \(apply)"
        case .portDenied:
            return "add \(port) to ports in \(entry), or to allow_ports in [proxy], of \(config); \(apply)"
        case .destinationDenied:
            return "\(host) resolves to a private address, which block_private_destinations = true in [proxy] of \(config) refuses."
        case .destinationMismatch:
            return "\(entry) has mode = \"tunnel\", which relays only connections bound to its name: the address the client went to must be one \(host) resolves to (for pinproxy: [resolve] in \(config), or DNS), and its ClientHello may not hide the name it is for (encrypted_client_hello)."
        case .noSNI:
            return "the client named no host (no SNI): add a [hosts.\"\(host)\"] entry for the address it connected to, in \(config); \(apply)"
        case .captureLoop:
            return "none here: either pinproxy's own connection was captured (run pinproxy as a user of exempt_users in [capture] of \(config), then `pinproxy egress apply`), or this connection was made straight to the transparent listener, which relays only connections the egress lock redirects to it."
        case .clientLimit:
            return "close some of this client's open tunnels, or raise max_tunnels_per_client in [proxy] of \(config); \(apply)"
        case .dnsFailure, .upstreamUnreachable, .handshakeFailed, .upstreamTimeout:
            return "none needed: pinproxy could not reach \(host):\(port), which is not a policy decision."
        case .customCheck, .cleartextDenied, .badRequest:
            return nil
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
