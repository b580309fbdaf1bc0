/// What happened to one client connection: the decision line's `outcome` and the metrics'
/// `outcome` label, one spelling for both.
public enum ConnectionOutcome: String, Sendable, CaseIterable {
    case allowed
    case refused
    /// `enforce = false`: allowed, but the entry would have refused.
    case reportOnly = "report-only"
    /// The client left before its tunnel opened (while pinproxy resolved, connected or
    /// handshook upstream): no decision was sent.
    case clientGone = "client-gone"
    /// `mode = "tunnel"`: relayed unverified.
    case tunnel
}
