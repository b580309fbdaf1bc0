import PinproxyCore

/// Whether the client can be given what the upstream negotiated, so that both sides of a
/// tunnel speak the same protocol.
public enum ALPNAgreement {
    /// True when a client that offers `clientOffer` (nil: no ALPN extension) can be given
    /// exactly what the upstream negotiated (`upstream`, nil: none) in answer to `upstreamOffer`:
    /// - the upstream chose a protocol the client offers (the client gets it);
    /// - the upstream chose none, and the client offers nothing the upstream was not already
    ///   offered (asked again, it would choose none again; the client gets none);
    /// - the client offers no ALPN, and the upstream chose none or http/1.1 (what such a
    ///   client speaks; it gets no ALPN).
    /// Otherwise the upstream must be asked again with the client's own offer.
    public static func carries(upstream: ALPNProtocol?, upstreamOffer: ALPNOffer, clientOffer: ALPNOffer?) -> Bool {
        guard let clientOffer else { return upstream == nil || upstream == .http11 }
        guard let upstream else { return Set(clientOffer.protocols).isSubset(of: upstreamOffer.protocols) }
        return clientOffer.protocols.contains(upstream)
    }

    /// What the upstream is offered when it must be asked again for this client.
    public static func reopenOffer(for clientOffer: ALPNOffer?) -> ALPNOffer {
        clientOffer ?? .noClientOffer
    }
}
