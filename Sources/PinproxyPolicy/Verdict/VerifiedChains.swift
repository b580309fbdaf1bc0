import FoundationEssentials
import PinproxyCore
import PinproxyInterop

/// The chains verified against the stores of one config generation, so that the same chain
/// (a resumed connection's, or the next client's of the same server) is not verified again
/// while nothing that decided it has changed. Per store, keyed by the SHA-256 of every
/// presented certificate, in order, and of every CRL; an entry answers only while the time is
/// strictly inside every certificate's and every CRL's validity, and for `lifetime` at most.
/// Only verified chains are kept: a failure is always worked out afresh, with all its problems.
/// The config generation owns it (a reload starts a new one, with its new stores).
public final class VerifiedChains: Sendable {
    struct Key: Hashable, Sendable {
        let certificates: [[UInt8]]
        let crls: [[UInt8]]?

        init(leaf: Certificate, intermediates: [Certificate], crls: [RevocationList]?) {
            certificates = ([leaf] + intermediates).map(\.certificateSHA256)
            self.crls = crls?.map(\.sha256)
        }
    }

    private struct Entry: Sendable {
        let result: ChainVerification
        /// The validation second must be after this and before `validUntil`.
        let validAfter: Date
        let validUntil: Date
        let expires: TimeInterval
    }

    /// One store's chains. It holds the store, so that no other store can take its identity.
    private struct Remembered: Sendable {
        let store: TrustStore
        var entries: [Key: Entry] = [:]
    }

    private let stores = Locked<[ObjectIdentifier: Remembered]>([:])
    /// Entries per store; when full, the store's are all forgotten and it starts again.
    static let capacity = 1024
    /// How long an entry answers at most (monotonic seconds).
    static let lifetime: TimeInterval = 300

    /// Monotonic seconds, from the verdict's context (`VerdictContext.monotonicClock`).
    private let clock: @Sendable () -> TimeInterval

    public init(clock: @escaping @Sendable () -> TimeInterval = { ProcessLimits.monotonicSeconds() }) {
        self.clock = clock
    }

    func result(for key: Key, in store: TrustStore, at time: Date) -> ChainVerification? {
        let second = Date(timeIntervalSince1970: time.timeIntervalSince1970.rounded(.down))
        let now = clock()
        return stores.withLock { stores -> ChainVerification? in
            guard let entry = stores[ObjectIdentifier(store)]?.entries[key] else { return nil }
            guard now < entry.expires else {
                stores[ObjectIdentifier(store)]?.entries[key] = nil
                return nil
            }
            return entry.validAfter < second && second < entry.validUntil ? entry.result : nil
        }
    }

    func remember(_ result: ChainVerification, for key: Key, in store: TrustStore, crls: [RevocationList], at time: Date) {
        let presented = result.chain
        var validAfter = presented.map(\.notBefore).max() ?? .distantFuture
        var validUntil = presented.map(\.notAfter).min() ?? .distantPast
        for crl in crls {
            validAfter = max(validAfter, crl.lastUpdate ?? .distantFuture)
            validUntil = min(validUntil, crl.nextUpdate ?? validUntil)
        }
        let entry = Entry(result: result, validAfter: validAfter, validUntil: validUntil,
                          expires: clock() + Self.lifetime)
        stores.withLock { stores in
            var remembered = stores[ObjectIdentifier(store)] ?? Remembered(store: store)
            if remembered.entries.count >= Self.capacity { remembered.entries.removeAll() }
            remembered.entries[key] = entry
            stores[ObjectIdentifier(store)] = remembered
        }
    }

    // MARK: SCTs

    /// The SCTs OpenSSL validated for one verified leaf and issuer, with the SCTs the handshake
    /// delivered beside the certificate then.
    private struct RememberedSCTs: Sendable {
        let delivered: [DeliveredSCT]
        let observations: [SCTObservation]
        let validUntil: Date
        let expires: TimeInterval
    }

    private let scts = Locked<[[[UInt8]]: RememberedSCTs]>([:])

    /// The SCTs validated for the verified `leaf` and `issuer` when the handshake delivered
    /// `delivered` (TLS extension and staple) beside them; a resumed session (`resumed`)
    /// delivers none and takes what the full handshake had. nil: validate them.
    func validatedSCTs(leaf: Certificate, issuer: Certificate, delivered: [DeliveredSCT], resumed: Bool, at time: Date) -> [SCTObservation]? {
        let key = [leaf.certificateSHA256, issuer.certificateSHA256]
        let now = ProcessLimits.monotonicSeconds()
        return scts.withLock { scts -> [SCTObservation]? in
            guard let entry = scts[key] else { return nil }
            guard now < entry.expires, time < entry.validUntil else {
                scts[key] = nil
                return nil
            }
            return resumed || entry.delivered == delivered ? entry.observations : nil
        }
    }

    /// Keeps what OpenSSL said of the SCTs of a full handshake (a resumed one keeps nothing).
    func rememberSCTs(_ observations: [SCTObservation], leaf: Certificate, issuer: Certificate, delivered: [DeliveredSCT]) {
        let entry = RememberedSCTs(delivered: delivered, observations: observations, validUntil: leaf.notAfter,
                                   expires: ProcessLimits.monotonicSeconds() + Self.lifetime)
        scts.withLock { scts in
            if scts.count >= Self.capacity { scts.removeAll() }
            scts[[leaf.certificateSHA256, issuer.certificateSHA256]] = entry
        }
    }
}
