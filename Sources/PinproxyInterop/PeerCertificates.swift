import COpenSSL

/// The `Certificate` objects of the peer chains of the sessions one loop resumed, by `X509`
/// address. A resumed session presents the very `X509` objects of the session it resumes, so
/// every connection of a session gets the same `Certificate`, and what is derived from it (the
/// digests that pins and the verified-chain memo compare, the subject a log line shows) is
/// computed once per certificate instead of once per connection. Each entry holds a reference
/// to its `X509`: no address here can be freed and reused for another certificate. At most
/// `limit` entries; a full table starts over. Used on its loop's thread only.
final class PeerCertificates {
    private var byAddress: [OpaquePointer: Certificate] = [:]
    let limit: Int

    init(limit: Int = 512) {
        self.limit = limit
    }

    /// The one `Certificate` for `x509` (which the caller holds a reference to).
    func certificate(for x509: OpaquePointer) -> Certificate {
        if let known = byAddress[x509] { return known }
        if byAddress.count >= limit { byAddress.removeAll(keepingCapacity: true) }
        let certificate = Certificate(retaining: x509)
        byAddress[x509] = certificate
        return certificate
    }

    /// Entries held.
    var count: Int { byAddress.count }
}
