import FoundationEssentials
import PinproxyInterop

/// The outcome of evaluating one connection against its policy entry, with everything an
/// operator needs to see why.
public struct Verdict: Sendable {
    /// Allow, refuse, or allow while reporting the refusal that `enforce = false` suppressed.
    public enum Outcome: Sendable, Equatable {
        case allow
        case refuse(RefusalReason)
        case reportOnly(RefusalReason)
    }

    /// One failed check.
    public struct Failure: Sendable, Equatable, CustomStringConvertible {
        public let reason: RefusalReason
        public let detail: String
        /// Whatever `enforce` says, this failure only reports (`ct = "report-only"`, or a CT
        /// log list too old to enforce with).
        public let reportsOnly: Bool

        public init(_ reason: RefusalReason, _ detail: String, reportsOnly: Bool = false) {
            self.reason = reason
            self.detail = detail
            self.reportsOnly = reportsOnly
        }

        public var description: String { "\(reason.rawValue): \(detail)" }
    }

    /// What the pin check found.
    public enum PinCheck: Sendable, Equatable {
        /// The entry pins nothing.
        case notPinned
        /// The entry's `expires` date has passed: pins are not enforced.
        case expired(String)
        /// `pin` matched the certificate at `position` of the verified chain (0 = leaf).
        case matched(Pin, position: Int)
        /// No certificate the pins may match carries a pinned digest.
        case noMatch
        /// The checks before it ended the evaluation.
        case notReached
    }

    public let outcome: Outcome
    public let entry: PolicyEntry
    /// Each check the verdict made, in order, with what it found.
    public let checks: [CheckResult]
    /// Every failure the checks found, most important first.
    public let failures: [Failure]
    /// The chain as the server presented it, leaf first.
    public let presented: [Certificate]
    /// The chain OpenSSL built and verified, leaf first (only the leaf under `trust = "none"`).
    public let verified: [Certificate]
    /// Whether OpenSSL verified `verified` to an anchor without a problem. False when it found
    /// one, under `trust = "none"`, and when no certificate was checked.
    public let pathVerified: Bool
    public let pinCheck: PinCheck
    /// Facts worth logging that are not failures (allow-insecure, expired pins).
    public let notes: [String]
    /// What the CT check found: every SCT, counted or why not, and the policy's answer; nil when
    /// the entry's `ct` is off or the check was not reached.
    public let certificateTransparency: CTPolicy.Judgement?

    init(outcome: Outcome, entry: PolicyEntry, checks: [CheckResult], presented: [Certificate], verified: [Certificate],
         pathVerified: Bool, pinCheck: PinCheck, notes: [String], certificateTransparency: CTPolicy.Judgement? = nil) {
        self.outcome = outcome
        self.entry = entry
        self.checks = checks
        self.failures = Self.failures(of: checks)
        self.presented = presented
        self.verified = verified
        self.pathVerified = pathVerified
        self.pinCheck = pinCheck
        self.notes = notes
        self.certificateTransparency = certificateTransparency
    }

    /// Every failure of `checks`, most important first (in check order within a reason).
    static func failures(of checks: [CheckResult]) -> [Failure] {
        checks.flatMap(\.failures).sorted { $0.reason < $1.reason }
    }

    /// The reason the connection is (or would be) refused, if any.
    public var reason: RefusalReason? {
        switch outcome {
        case .allow: return nil
        case .refuse(let reason), .reportOnly(let reason): return reason
        }
    }

    /// `allow`, `refuse: <reason>` or `allow (would refuse: <reason>)`.
    public var summary: String {
        switch outcome {
        case .allow: return "allow"
        case .refuse(let reason): return "refuse: \(reason.rawValue)"
        case .reportOnly(let reason): return "allow (would refuse: \(reason.rawValue))"
        }
    }

    /// The path OpenSSL verified, leaf to anchor, or nil when it verified none (`pathVerified`).
    public var verifiedPath: [Certificate]? { pathVerified ? verified : nil }

    /// Whether the connection may proceed.
    public var allowsConnection: Bool {
        if case .refuse = outcome { return false }
        return true
    }

    /// Whether the entry's `client_certificate` may go to the server this verdict judged: only
    /// to one that passed every check of an entry that checks servers. A report-only failure
    /// (`enforce = false`) withholds it too: the connection goes on, without the identity.
    public var releasesClientCertificate: Bool {
        outcome == .allow && entry.policy.action == .verify
    }
}
