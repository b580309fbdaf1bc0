/// One check of the verdict and what it found, in the order the verdict made them: the
/// verdict's own account of itself, which `diagnose` and `evaluate` print.
public struct CheckResult: Sendable, Equatable, CustomStringConvertible {
    /// Which check.
    public enum Check: Sendable, Hashable, CustomStringConvertible {
        /// `action = "deny"` (host-denied).
        case action
        /// `ports` (port-denied).
        case ports
        /// OpenSSL's path to the entry's anchors at the time, and the CAs' name constraints.
        case chain
        /// One web-PKI rule beyond OpenSSL, by its name.
        case rule(String)
        /// The leaf's revocation status: the entry's CRLs (through OpenSSL) or the OCSP staple.
        case revocation
        /// The host against the leaf's subjectAltNames.
        case hostName
        /// The pins against the verified chain.
        case pins
        /// Certificate Transparency: enough qualifying SCTs (`ct`).
        case certificateTransparency
        /// The entry's `verify_command`.
        case customCheck
        /// `[clients]`: whether the client may reach the host (client-denied).
        case client

        public var description: String {
            switch self {
            case .action: return "action"
            case .ports: return "ports"
            case .chain: return "chain"
            case .rule(let name): return "rule \(name)"
            case .revocation: return "revocation"
            case .hostName: return "host name"
            case .pins: return "pins"
            case .certificateTransparency: return "certificate transparency"
            case .customCheck: return "custom check"
            case .client: return "client"
            }
        }
    }

    /// How the check came out.
    public enum Status: String, Sendable, Equatable {
        case passed
        case failed
        /// A check before it ended the evaluation, or made it meaningless.
        case notReached = "not reached"
        /// The entry turns the check off (allow-insecure, `trust = "none"`, no pins, …).
        case notChecked = "not checked"
    }

    public let check: Check
    public let status: Status
    /// What it found wrong, one failure (reason and detail) per problem; empty unless failed.
    public let failures: [Verdict.Failure]

    public init(_ check: Check, _ status: Status, failures: [Verdict.Failure] = []) {
        self.check = check
        self.status = status
        self.failures = failures
    }

    /// The outcome of a check that found `failures` (none: passed).
    public init(_ check: Check, found failures: [Verdict.Failure]) {
        self.init(check, failures.isEmpty ? .passed : .failed, failures: failures)
    }

    /// `chain: passed`, `pins: failed (pin-mismatch: …)`.
    public var description: String {
        "\(check): \(status.rawValue)" + (failures.isEmpty ? "" : " (" + failures.map(\.description).joined(separator: "; ") + ")")
    }
}
