import FoundationEssentials
import PinproxyInterop

/// What the verdict reads besides the entry, loaded with one config generation and handed in
/// with it: the public suffix list, and the memory of the chains verified under this generation's
/// stores, and the CT log list. A reload builds a new context, so the memory starts empty with
/// the new stores and log list.
public final class VerdictContext: Sendable {
    /// The list the `wildcard-public-suffix` rule consults.
    public let publicSuffixes: PublicSuffixList
    /// Monotonic seconds: how long a verified chain is remembered (`verifiedChains`).
    public let monotonicClock: @Sendable () -> TimeInterval
    /// The chains OpenSSL verified under this generation (`TrustStore.verify`), remembered by
    /// `monotonicClock`.
    public let verifiedChains: VerifiedChains
    /// `[proxy] ct_log_list`, read with this generation; nil when not set.
    public let ctLogs: CTLogs?

    public init(publicSuffixes: PublicSuffixList, ctLogs: CTLogs? = nil,
                monotonicClock: @escaping @Sendable () -> TimeInterval = { ProcessLimits.monotonicSeconds() }) {
        self.publicSuffixes = publicSuffixes
        self.monotonicClock = monotonicClock
        self.ctLogs = ctLogs
        verifiedChains = VerifiedChains(clock: monotonicClock)
    }
}
