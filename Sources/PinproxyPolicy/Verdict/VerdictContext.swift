import Foundation
import PinproxyInterop

/// What the verdict reads besides the entry, loaded with one config generation and handed in
/// with it: the public suffix list, and the memory of the chains verified under this generation's
/// stores. A reload builds a new context, so the memory starts empty with the new stores.
public final class VerdictContext: Sendable {
    /// The list the `wildcard-public-suffix` rule consults.
    public let publicSuffixes: PublicSuffixList
    /// Monotonic seconds: how long a verified chain is remembered (`verifiedChains`).
    public let monotonicClock: @Sendable () -> TimeInterval
    /// The chains OpenSSL verified under this generation (`TrustStore.verify`), remembered by
    /// `monotonicClock`.
    public let verifiedChains: VerifiedChains

    public init(publicSuffixes: PublicSuffixList, monotonicClock: @escaping @Sendable () -> TimeInterval = { ProcessLimits.monotonicSeconds() }) {
        self.publicSuffixes = publicSuffixes
        self.monotonicClock = monotonicClock
        verifiedChains = VerifiedChains(clock: monotonicClock)
    }
}
