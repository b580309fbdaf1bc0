import FoundationEssentials
import PinproxyCore
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
        /// The SCTs of the TLS extension (RFC 6962 `SerializedSCT` each).
        public var tlsExtensionSCTs: [[UInt8]]
        /// Whether the handshake resumed a session (and so delivered no SCT beside the chain).
        public var resumed: Bool

        public init(chain: [Certificate], ocspStaple: [UInt8]? = nil, tlsExtensionSCTs: [[UInt8]] = [], resumed: Bool = false) {
            self.chain = chain
            self.ocspStaple = ocspStaple
            self.tlsExtensionSCTs = tlsExtensionSCTs
            self.resumed = resumed
        }
    }

    /// Decides whether `entry` admits a connection to `host`:`port` given the server's
    /// presentation at `time`, with the public suffix list and chain memory of `context` (the
    /// config generation `entry` belongs to). Checks, in order:
    /// 1. `action = "deny"` → host-denied; a port outside `ports` → port-denied (under
    ///    `enforce = false` the evaluation goes on, so every would-be refusal is listed);
    ///    `allow-insecure` → allow with no further check.
    /// 2. The chain, built and verified by OpenSSL to the entry's anchors at `time` (purpose TLS
    ///    server, security level 2, partial chains for listed and pinned anchors, the entry's
    ///    CRLs), and the host against every CA's name constraints; skipped under `trust = "none"`.
    ///    Then the web-PKI rules beyond OpenSSL (`WebPKIProfile`) on the chain OpenSSL verified.
    /// 3. Revocation: the entry's CRLs (OpenSSL's problems) or a required OCSP staple.
    /// 4. The host against the leaf's subjectAltName (DNS, or IP for IP literals).
    /// 5. The pins against the verified chain, any position (only the leaf under `trust = "none"`),
    ///    unless `expires` has passed.
    /// 6. Certificate Transparency (`ct` other than off), on a verified chain that ends at a
    ///    system-store anchor: the SCTs of the leaf, the TLS extension and the staple, validated
    ///    by OpenSSL with the generation's log list, counted by Chrome's policy (`CTPolicy`).
    ///    `ct = "report-only"`, or a list older than 70 days, reports ct-missing only.
    /// 7. The entry's `verify_command`, not reached here: the caller runs it (`adding`).
    /// Every check's result is kept (`Verdict.checks`); the verdict names the most important
    /// failure. With `enforce = false`, pin-mismatch, revocation-unknown, host-denied and
    /// port-denied become report-only (never a silent allow); any other failure still refuses,
    /// and names the verdict.
    public static func evaluate(
        _ presentation: Presentation,
        host: TargetHost,
        port: UInt16,
        entry: PolicyEntry,
        context: VerdictContext,
        at time: Date
    ) -> Verdict {
        let policy = entry.policy
        var checks = requestChecks(port: port, entry: entry)
        var notes: [String] = []
        var verified: [Certificate] = []
        var pathVerified = false
        var pinCheck = Verdict.PinCheck.notReached
        var ctJudgement: CTPolicy.Judgement?

        /// The verdict on `checks`, with `rest` for each check not made.
        func finish(_ rest: CheckResult.Status) -> Verdict {
            let made = Set(checks.map(\.check))
            let unmade = ([.chain] + WebPKIProfile.applicableRules(policy: policy, chain: verified).map { .rule($0.name) }
                          + [.revocation, .hostName, .pins] + (policy.ct == .off ? [] : [.certificateTransparency])
                          + [.customCheck]).filter { !made.contains($0) }
            checks += unmade.map { CheckResult($0, rest == .notReached ? Self.unreached($0, policy: policy) : rest) }
            let failures = Verdict.failures(of: checks)
            let outcome = Self.outcome(failures, policy: policy, notes: &notes)
            return Verdict(outcome: outcome, entry: entry, checks: checks, presented: presentation.chain,
                           verified: verified, pathVerified: pathVerified, pinCheck: pinCheck, notes: notes,
                           certificateTransparency: ctJudgement)
        }

        // Report-only request failures do not end the evaluation: the operator sees everything
        // that would refuse the connection.
        if checks.contains(where: { $0.status == .failed }) && policy.enforce { return finish(.notReached) }
        if policy.action == .allowInsecure {
            notes.append("\(entry.name) has action = \"allow-insecure\": no certificate check was made")
            return finish(.notChecked)
        }
        guard let leaf = presentation.chain.first else {
            checks.append(CheckResult(.chain, found: [.init(.untrustedChain, "the server presented no certificate")]))
            return finish(.notReached)
        }

        // 2. The chain, and the revocation problems OpenSSL found with the entry's CRLs.
        var chainFailures: [Verdict.Failure] = []
        var revocationFailures: [Verdict.Failure] = []
        if let store = policy.trust.store {
            let crls: [RevocationList]? = if case .crl(let lists) = policy.revocation { lists } else { nil }
            let verification = store.verify(leaf: leaf, intermediates: Array(presentation.chain.dropFirst()),
                                            at: time, crls: crls, remembering: context.verifiedChains)
            verified = verification.chain
            pathVerified = verification.isVerified
            for problem in verification.problems {
                let failure = Verdict.Failure(reason(for: problem.kind), problem.description)
                switch problem.kind {
                case .revoked, .revocationUnknown: revocationFailures.append(failure)
                case .expired, .notYetValid, .untrusted: chainFailures.append(failure)
                }
            }
            // Name constraints bind the host itself, not just the names the leaf carries (a
            // wildcard may cover an excluded name). A host the leaf does not name at all is a
            // hostname-mismatch, reported below.
            if policy.validateHost, case .name(let name) = host, leaf.matchesHostName(name) {
                for issuer in verified.dropFirst() where !issuer.nameConstraintsPermit(dnsName: name) {
                    chainFailures.append(.init(.untrustedChain, "the name constraints of \(issuer.subject) do not permit \(name)"))
                }
            }
            checks.append(CheckResult(.chain, found: chainFailures))
        } else {
            verified = [leaf]
            notes.append("trust = \"none\": the chain was not verified; only the leaf may match a pin")
            checks.append(CheckResult(.chain, .notChecked))
        }
        // 2b. The web-PKI rules beyond OpenSSL, on the chain it verified (or the leaf alone
        // under trust = "none"); each failure names its rule.
        let rules = WebPKIProfile.applicableRules(policy: policy, chain: verified)
        if chainFailures.isEmpty && revocationFailures.isEmpty {
            checks += WebPKIProfile.checks(rules, chain: verified, host: host, policy: policy, publicSuffixes: context.publicSuffixes)
        } else {
            checks += rules.map { CheckResult(.rule($0.name), .notReached) }
        }

        // 3. Revocation.
        switch policy.revocation {
        case .off:
            checks.append(CheckResult(.revocation, .notChecked))
        case .crl:
            checks.append(CheckResult(.revocation, policy.trust.store == nil ? .notChecked : revocationFailures.isEmpty ? .passed : .failed,
                                      failures: revocationFailures))
        case .ocspStaple:
            checks.append(CheckResult(.revocation, found: checkStaple(presentation.ocspStaple, verified: verified, at: time).map { [$0] } ?? []))
        }

        // 4. The host.
        if policy.validateHost {
            let matches: Bool
            switch host {
            case .name(let name): matches = leaf.matchesHostName(name)
            case .ip(let address): matches = leaf.matchesIPAddress(address)
            }
            let names = leaf.subjectAlternativeNames
            checks.append(CheckResult(.hostName, found: matches ? [] : [.init(.hostnameMismatch, "\(host) is not among the leaf's subjectAltNames (\(names.isEmpty ? "none" : names.joined(separator: ", ")))")]))
        } else {
            checks.append(CheckResult(.hostName, .notChecked))
        }

        // 5. The pins.
        pinCheck = checkPins(policy, candidates: verified, at: time)
        switch pinCheck {
        case .noMatch:
            let scope = policy.trust.store == nil ? "the leaf" : "the verified chain"
            checks.append(CheckResult(.pins, found: [.init(.pinMismatch, "none of the \(policy.pins.count) \(policy.pinKind.rawValue) pin(s) matches \(scope)")]))
        case .expired(let date):
            notes.append("pins expired on \(date) and were not enforced")
            checks.append(CheckResult(.pins, .notChecked))
        case .notPinned:
            checks.append(CheckResult(.pins, .notChecked))
        case .matched:
            checks.append(CheckResult(.pins, .passed))
        case .notReached:
            checks.append(CheckResult(.pins, .notReached))
        }

        // 6. Certificate Transparency.
        if policy.ct != .off, pathVerified, verified.count >= 2, let logs = context.ctLogs {
            let judgement = judgeCT(presentation, verified: verified, policy: policy, logs: logs, context: context, at: time)
            ctJudgement = judgement
            switch judgement.outcome {
            case .notApplicable(let why):
                notes.append("ct: not applied: \(why)")
                checks.append(CheckResult(.certificateTransparency, .notChecked))
            case .compliant:
                checks.append(CheckResult(.certificateTransparency, .passed))
            case .notCompliant(let why):
                let stale = logs.list.isStale(at: time)
                if stale {
                    notes.append("ct: the CT log list \(logs.path) is \(Int(logs.list.age(at: time) / 86_400)) days old (more than \(CTLogList.maximumAgeDays)): ct-missing is reported, not enforced")
                }
                checks.append(CheckResult(.certificateTransparency, found: [.init(.ctMissing, why, reportsOnly: policy.ct == .reportOnly || stale)]))
            }
        }
        return finish(.notReached)
    }

    /// The CT policy's answer for the verified chain: the SCTs of the leaf, the TLS extension
    /// and the staple, as OpenSSL validated them with `logs` (kept with the chain in
    /// `VerifiedChains`, so that a resumed session costs no signature check).
    static func judgeCT(_ presentation: Presentation, verified: [Certificate], policy: HostPolicy, logs: CTLogs,
                        context: VerdictContext, at time: Date) -> CTPolicy.Judgement {
        let (leaf, issuer) = (verified[0], verified[1])
        let delivered = presentation.tlsExtensionSCTs.map { DeliveredSCT(source: .tlsExtension, bytes: $0) }
            + (presentation.ocspStaple.map(SignedCertificateTimestamps.inOCSPResponse) ?? []).map { DeliveredSCT(source: .ocsp, bytes: $0) }
        let observations: [SCTObservation]
        if let known = context.verifiedChains.validatedSCTs(leaf: leaf, issuer: issuer, delivered: delivered, resumed: presentation.resumed, at: time) {
            observations = known
        } else {
            let embedded = SignedCertificateTimestamps.embedded(in: leaf).map { DeliveredSCT(source: .embedded, bytes: $0) }
            observations = SignedCertificateTimestamps.validate(embedded + delivered, leaf: leaf, issuer: issuer, store: logs.store, at: time)
            context.verifiedChains.rememberSCTs(observations, leaf: leaf, issuer: issuer, delivered: delivered)
        }
        return CTPolicy.judge(observations, logs: logs.list, notBefore: leaf.notBefore, notAfter: leaf.notAfter,
                              endsAtSystemAnchor: endsAtSystemAnchor(policy.trust, verified: verified), at: time)
    }

    /// Whether the verified chain ends at an anchor of the system store: always under
    /// `trust = "system"`; under `["system", FILE…]` unless it ends at a listed certificate.
    static func endsAtSystemAnchor(_ trust: HostPolicy.Trust, verified: [Certificate]) -> Bool {
        switch trust {
        case .system: return true
        case .systemAndListed(_, let listed):
            guard let anchor = verified.last else { return false }
            return !listed.contains { $0.certificateSHA256 == anchor.certificateSHA256 }
        case .pinned, .anchors, .none: return false
        }
    }

    /// How a check the evaluation did not get to stands: not checked when the entry turns it
    /// off anyway, else not reached.
    static func unreached(_ check: CheckResult.Check, policy: HostPolicy) -> CheckResult.Status {
        switch check {
        case .chain: return policy.trust.store == nil ? .notChecked : .notReached
        case .revocation: if case .off = policy.revocation { return .notChecked } else { return .notReached }
        case .hostName: return policy.validateHost ? .notReached : .notChecked
        case .pins: return policy.pinKind == .none ? .notChecked : .notReached
        case .certificateTransparency: return policy.ct == .off ? .notChecked : .notReached
        case .customCheck: return policy.action == .verify && policy.verifyCommand != nil ? .notReached : .notChecked
        case .action, .ports, .rule, .client: return .notReached
        }
    }

    /// The outcome of `failures` (sorted, most important first) under `policy`: allow without
    /// failures; with `enforce = false`, report-only when every failure may be; else refuse.
    static func outcome(_ failures: [Verdict.Failure], policy: HostPolicy, notes: inout [String]) -> Verdict.Outcome {
        guard let first = failures.first else { return .allow }
        let enforceable = failures.filter { !$0.reportsOnly }
        guard let firstEnforceable = enforceable.first else { return .reportOnly(first.reason) }
        if policy.enforce { return .refuse(firstEnforceable.reason) }
        if let enforced = enforceable.first(where: { !$0.reason.traits.mayBeReportOnly }) {
            notes.append("enforce = false does not apply to \(enforced.reason.rawValue): only pin, ct-missing, unknown-revocation, custom-check, host and port refusals can be report-only")
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
        let result = CheckResult(.customCheck, found: check.passed ? [] : [Verdict.Failure(.customCheck, check.detail)])
        let checks = verdict.checks.map { $0.check == .customCheck ? result : $0 }
        var notes = verdict.notes
        let outcome = check.passed ? verdict.outcome : Self.outcome(Verdict.failures(of: checks), policy: verdict.entry.policy, notes: &notes)
        return Verdict(outcome: outcome, entry: verdict.entry, checks: checks, presented: verdict.presented,
                       verified: verdict.verified, pathVerified: verdict.pathVerified, pinCheck: verdict.pinCheck, notes: notes,
                       certificateTransparency: verdict.certificateTransparency)
    }

    /// `verdict` with what `[clients]` decided for the connection, applied after every other
    /// check (the client's narrowing has its own `enforce`): an enforced client-denied refuses
    /// whatever the verdict was; a report-only one is added to an admitting verdict's failures.
    public static func adding(_ client: ClientDecision, to verdict: Verdict) -> Verdict {
        let checks = verdict.checks + [CheckResult(.client, found: [Verdict.Failure(.clientDenied, client.detail)])]
        let failures = Verdict.failures(of: checks)
        let outcome: Verdict.Outcome
        switch client.outcome {
        case .allow: return verdict
        case .refuse: outcome = .refuse(.clientDenied)
        case .reportOnly: outcome = verdict.allowsConnection ? .reportOnly(failures[0].reason) : verdict.outcome
        }
        return Verdict(outcome: outcome, entry: verdict.entry, checks: checks, presented: verdict.presented,
                       verified: verdict.verified, pathVerified: verdict.pathVerified, pinCheck: verdict.pinCheck, notes: verdict.notes,
                       certificateTransparency: verdict.certificateTransparency)
    }

    /// The part of the decision that needs no connection: host-denied and port-denied (and
    /// their report-only forms). The proxy calls it before resolving; nil means go on.
    public static func evaluateRequest(port: UInt16, entry: PolicyEntry) -> Verdict? {
        let checks = requestChecks(port: port, entry: entry)
        guard let first = Verdict.failures(of: checks).first else { return nil }
        let outcome: Verdict.Outcome = entry.policy.enforce ? .refuse(first.reason) : .reportOnly(first.reason)
        return Verdict(outcome: outcome, entry: entry, checks: checks, presented: [], verified: [],
                       pathVerified: false, pinCheck: .notReached, notes: [])
    }

    /// The action (host-denied) and the ports (port-denied), in that order.
    private static func requestChecks(port: UInt16, entry: PolicyEntry) -> [CheckResult] {
        let policy = entry.policy
        let denied: [Verdict.Failure] = policy.action == .deny ? [.init(.hostDenied, "\(entry.name) has action = \"deny\"")] : []
        var outside: [Verdict.Failure] = []
        if !policy.ports.contains(port) {
            let allowed = policy.ports.sorted().map(String.init).joined(separator: ", ")
            outside.append(.init(.portDenied, "port \(port) is not allowed for \(entry.name) (allowed: \(allowed))"))
        }
        return [CheckResult(.action, found: denied), CheckResult(.ports, found: outside)]
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
