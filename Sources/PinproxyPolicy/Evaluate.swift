import Foundation
import PinproxyInterop

/// The one trust decision of pinproxy. The daemon, `pinproxy evaluate` and the tests all call
/// `evaluate`; it opens no sockets and reads no files.
public enum TrustEvaluator {
    /// What the server presented and when.
    public struct Presentation: Sendable {
        /// The chain as presented, leaf first.
        public var chain: [Certificate]
        /// The stapled OCSP response (DER), if the server sent one.
        public var ocspStaple: [UInt8]?

        public init(chain: [Certificate], ocspStaple: [UInt8]? = nil) {
            self.chain = chain
            self.ocspStaple = ocspStaple
        }
    }

    /// Decides whether `entry` admits a connection to `host`:`port` given the server's
    /// presentation at `time`. Checks, in order:
    /// 1. `action = "deny"` → host-denied; a port outside `ports` → port-denied (under
    ///    `enforce = false` the evaluation goes on, so every would-be refusal is listed);
    ///    `allow-insecure` → allow with no further check.
    /// 2. The chain, built and verified by OpenSSL to the entry's anchors at `time` (purpose TLS
    ///    server, security level 2, partial chains for listed and pinned anchors, the entry's
    ///    CRLs), and the host against every CA's name constraints; skipped under `trust = "none"`.
    ///    Then the web-PKI rules beyond OpenSSL (`WebPKIProfile`) on the chain OpenSSL verified.
    /// 3. A required OCSP staple.
    /// 4. The host against the leaf's subjectAltName (DNS, or IP for IP literals).
    /// 5. The pins against the verified chain, any position (only the leaf under `trust = "none"`),
    ///    unless `expires` has passed.
    /// Every failure is kept; the verdict names the most important. With `enforce = false`,
    /// pin-mismatch, revocation-unknown, host-denied and port-denied become report-only (never
    /// a silent allow); any other failure still refuses, and names the verdict.
    public static func evaluate(
        _ presentation: Presentation,
        host: TargetHost,
        port: UInt16,
        entry: PolicyEntry,
        at time: Date
    ) -> Verdict {
        let policy = entry.policy
        var failures: [Verdict.Failure] = []
        var notes: [String] = []
        var verified: [Certificate] = []
        var pathVerified = false
        var pinCheck = Verdict.PinCheck.notReached

        func finish() -> Verdict {
            failures.sort { $0.reason < $1.reason }
            let outcome = Self.outcome(failures, policy: policy, notes: &notes)
            return Verdict(outcome: outcome, entry: entry, failures: failures, presented: presentation.chain,
                           verified: verified, pathVerified: pathVerified, pinCheck: pinCheck, notes: notes)
        }

        // Report-only request failures do not end the evaluation: the operator sees everything
        // that would refuse the connection.
        let requestFailures = requestChecks(port: port, entry: entry)
        failures += requestFailures
        if !requestFailures.isEmpty && policy.enforce { return finish() }
        if policy.action == .allowInsecure {
            notes.append("\(entry.name) has action = \"allow-insecure\": no certificate check was made")
            return finish()
        }
        guard let leaf = presentation.chain.first else {
            failures.append(.init(.untrustedChain, "the server presented no certificate"))
            return finish()
        }

        // 2. The chain.
        let failuresBeforeChain = failures.count
        if let store = policy.trust.store {
            let crls: [RevocationList]? = if case .crl(let lists) = policy.revocation { lists } else { nil }
            let verification = store.verify(leaf: leaf, intermediates: Array(presentation.chain.dropFirst()),
                                            at: time, crls: crls)
            verified = verification.chain
            pathVerified = verification.isVerified
            for problem in verification.problems {
                failures.append(.init(reason(for: problem.kind), problem.description))
            }
            // Name constraints bind the host itself, not just the names the leaf carries (a
            // wildcard may cover an excluded name). A host the leaf does not name at all is a
            // hostname-mismatch, reported below.
            if policy.validateHost, case .name(let name) = host, leaf.matchesHostName(name) {
                for issuer in verified.dropFirst() where !issuer.nameConstraintsPermit(dnsName: name) {
                    failures.append(.init(.untrustedChain, "the name constraints of \(issuer.subject) do not permit \(name)"))
                }
            }
        } else {
            verified = [leaf]
            notes.append("trust = \"none\": the chain was not verified; only the leaf may match a pin")
        }
        // 2b. The web-PKI rules beyond OpenSSL, on the chain it verified (or the leaf alone
        // under trust = "none"); each failure names its rule.
        if failures.count == failuresBeforeChain {
            failures += WebPKIProfile.failures(chain: verified, host: host, policy: policy)
        }

        // 3. OCSP staple.
        if case .ocspStaple = policy.revocation {
            if let failure = checkStaple(presentation.ocspStaple, verified: verified, at: time) {
                failures.append(failure)
            }
        }

        // 4. The host.
        if policy.validateHost {
            let matches: Bool
            switch host {
            case .name(let name): matches = leaf.matchesHostName(name)
            case .ip(let address): matches = leaf.matchesIPAddress(address)
            }
            if !matches {
                let names = leaf.subjectAlternativeNames
                failures.append(.init(.hostnameMismatch, "\(host) is not among the leaf's subjectAltNames (\(names.isEmpty ? "none" : names.joined(separator: ", ")))"))
            }
        }

        // 5. The pins.
        pinCheck = checkPins(policy, candidates: verified, at: time)
        switch pinCheck {
        case .noMatch:
            let scope = policy.trust.store == nil ? "the leaf" : "the verified chain"
            failures.append(.init(.pinMismatch, "none of the \(policy.pins.count) \(policy.pinKind.rawValue) pin(s) matches \(scope)"))
        case .expired(let date):
            notes.append("pins expired on \(date) and were not enforced")
        default:
            break
        }
        return finish()
    }

    /// The outcome of `failures` (sorted, most important first) under `policy`: allow without
    /// failures; with `enforce = false`, report-only when every failure may be; else refuse.
    static func outcome(_ failures: [Verdict.Failure], policy: HostPolicy, notes: inout [String]) -> Verdict.Outcome {
        guard let first = failures.first else { return .allow }
        if policy.enforce { return .refuse(first.reason) }
        if let enforced = failures.first(where: { !$0.reason.traits.mayBeReportOnly }) {
            notes.append("enforce = false does not apply to \(enforced.reason.rawValue): only pin, unknown-revocation, custom-check, host and port refusals can be report-only")
            return .refuse(enforced.reason)
        }
        return .reportOnly(first.reason)
    }

    /// Whether the entry's `verify_command` must run on `verdict`: the built-in checks let the
    /// connection through, and the entry checks certificates and names a command.
    public static func needsCustomCheck(_ verdict: Verdict) -> Bool {
        verdict.allowsConnection && verdict.entry.policy.action == .verify && verdict.entry.policy.verifyCommand != nil
    }

    /// `verdict` with the answer of the entry's `verify_command`: a failure adds `custom-check`
    /// and decides the outcome like any other failure. It can only refuse more: a passed check
    /// returns `verdict` unchanged.
    public static func adding(_ check: CustomCheckResult, to verdict: Verdict) -> Verdict {
        guard !check.passed else { return verdict }
        var failures = verdict.failures + [Verdict.Failure(.customCheck, check.detail)]
        failures.sort { $0.reason < $1.reason }
        var notes = verdict.notes
        let outcome = Self.outcome(failures, policy: verdict.entry.policy, notes: &notes)
        return Verdict(outcome: outcome, entry: verdict.entry, failures: failures, presented: verdict.presented,
                       verified: verdict.verified, pathVerified: verdict.pathVerified, pinCheck: verdict.pinCheck, notes: notes)
    }

    /// `verdict` with what `[clients]` decided for the connection, applied after every other
    /// check (the client's narrowing has its own `enforce`): an enforced client-denied refuses
    /// whatever the verdict was; a report-only one is added to an admitting verdict's failures.
    public static func adding(_ client: ClientDecision, to verdict: Verdict) -> Verdict {
        var failures = verdict.failures + [Verdict.Failure(.clientDenied, client.detail)]
        failures.sort { $0.reason < $1.reason }
        let outcome: Verdict.Outcome
        switch client.outcome {
        case .allow: return verdict
        case .refuse: outcome = .refuse(.clientDenied)
        case .reportOnly: outcome = verdict.allowsConnection ? .reportOnly(failures[0].reason) : verdict.outcome
        }
        return Verdict(outcome: outcome, entry: verdict.entry, failures: failures, presented: verdict.presented,
                       verified: verdict.verified, pathVerified: verdict.pathVerified, pinCheck: verdict.pinCheck, notes: verdict.notes)
    }

    /// The part of the decision that needs no connection: host-denied and port-denied (and
    /// their report-only forms). The proxy calls it before resolving; nil means go on.
    public static func evaluateRequest(port: UInt16, entry: PolicyEntry) -> Verdict? {
        let failures = requestChecks(port: port, entry: entry)
        guard let first = failures.first else { return nil }
        let outcome: Verdict.Outcome = entry.policy.enforce ? .refuse(first.reason) : .reportOnly(first.reason)
        return Verdict(outcome: outcome, entry: entry, failures: failures, presented: [], verified: [],
                       pathVerified: false, pinCheck: .notReached, notes: [])
    }

    /// host-denied and port-denied, in that order.
    private static func requestChecks(port: UInt16, entry: PolicyEntry) -> [Verdict.Failure] {
        let policy = entry.policy
        var failures: [Verdict.Failure] = []
        if policy.action == .deny {
            failures.append(.init(.hostDenied, "\(entry.name) has action = \"deny\""))
        }
        if !policy.ports.contains(port) {
            let allowed = policy.ports.sorted().map(String.init).joined(separator: ", ")
            failures.append(.init(.portDenied, "port \(port) is not allowed for \(entry.name) (allowed: \(allowed))"))
        }
        return failures
    }

    static func reason(for kind: ChainProblem.Kind) -> RefusalReason {
        switch kind {
        case .expired: return .certificateExpired
        case .notYetValid: return .certificateNotYetValid
        case .revoked: return .revoked
        case .revocationUnknown: return .revocationUnknown
        case .untrusted: return .untrustedChain
        }
    }

    static func checkStaple(_ staple: [UInt8]?, verified: [Certificate], at time: Date) -> Verdict.Failure? {
        guard let staple else {
            return .init(.revocationUnknown, "the policy requires an OCSP staple and the server sent none")
        }
        guard verified.count >= 2 else {
            return .init(.revocationUnknown, "the OCSP staple cannot be checked: the verified chain has no issuer for the leaf")
        }
        switch OCSPStaple.check(staple, leaf: verified[0], issuer: verified[1], at: time) {
        case .good: return nil
        case .revoked(let since):
            return .init(.revoked, "the OCSP staple says the leaf was revoked" + (since.map { " on \(rfc3339($0))" } ?? ""))
        case .unusable(let why):
            return .init(.revocationUnknown, why)
        }
    }

    static func checkPins(_ policy: HostPolicy, candidates: [Certificate], at time: Date) -> Verdict.PinCheck {
        guard policy.pinKind != .none else { return .notPinned }
        if let expiry = policy.pinsExpireAt, time >= expiry { return .expired(policy.expires ?? rfc3339(expiry)) }
        let accepted = Set(policy.pins)
        for (position, certificate) in candidates.enumerated() {
            let digest = policy.pinKind == .publicKey ? certificate.publicKeySHA256 : certificate.certificateSHA256
            let pin = Pin(digest: digest)
            if accepted.contains(pin) { return .matched(pin, position: position) }
        }
        return .noMatch
    }
}

/// `2026-01-31T12:00:00Z`.
public func rfc3339(_ date: Date) -> String {
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime]
    return formatter.string(from: date)
}
