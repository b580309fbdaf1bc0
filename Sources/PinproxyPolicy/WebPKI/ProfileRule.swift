import Foundation
import PinproxyInterop

/// One check pinproxy makes beyond OpenSSL's path validation, on the chain OpenSSL built and
/// verified: a type with one job, a name that the refusal's detail carries, and a scope.
protocol ProfileRule: Sendable {
    /// The rule's name, as a refusal's detail gives it: `rule NAME: …`.
    var name: String { get }
    /// Which chains the rule applies to.
    var scope: RuleScope { get }
    /// The refusal reason when the rule fails.
    var reason: RefusalReason { get }
    /// What is wrong, one entry per problem; empty when the chain meets the rule.
    func problems(in chain: ReviewedChain) -> [String]
}

extension ProfileRule {
    var reason: RefusalReason { .untrustedChain }
}

/// Which chains a rule applies to (README, "Trust decisions").
enum RuleScope: Sendable {
    /// RFC 5280 requirements that every CA meets: every chain OpenSSL verified, whatever its
    /// anchors (`system`, a list, `pinned`).
    case verifiedChains
    /// CA/Browser Forum issuance rules that private CAs and self-signed servers often skip
    /// (extendedKeyUsage, key identifiers, the CN among the SANs): chains verified to the
    /// system store or to listed anchors, unless the entry sets `require_web_pki_profile = false`.
    /// Never under `pinned` or `none`, where the operator trusts particular certificates.
    case webPKIIssuance
    /// Names the host check relies on: every chain, `trust = "none"` included, when the entry
    /// validates the host.
    case hostNames
}

/// The chain under review and the roles of its certificates.
struct ReviewedChain {
    /// Where the chain's anchor comes from.
    enum Anchors: Sendable { case system, listed, pinned, unverified }

    /// Leaf first, anchor last (only the leaf under `trust = "none"`).
    let certificates: [Certificate]
    let anchors: Anchors
    let host: TargetHost
    /// The entry's CRLs under `revocation = "crl"`.
    let crls: [RevocationList]

    var leaf: Certificate { certificates[0] }

    /// The leaf when a CA issued it; nil when the leaf is itself the anchor (a self-signed
    /// server the operator trusts directly), since no issuance rule binds that.
    var issuedLeaf: Certificate? { certificates.count > 1 ? certificates[0] : nil }

    /// The certificates between the leaf and the anchor.
    var intermediates: ArraySlice<Certificate> { certificates.count > 2 ? certificates.dropFirst().dropLast() : [] }

    /// The anchor, when the operator listed it (`trust = [files]`) and it is not the leaf:
    /// listed anchors are held to the profile. The system store's roots are taken as the
    /// distribution ships them (some long-trusted roots have a zero serial or no SKI), and a
    /// pinned anchor is a certificate the operator chose by its digest.
    var reviewedAnchor: Certificate? {
        anchors == .listed && certificates.count > 1 ? certificates.last : nil
    }

    /// The certificates CAs issued below the anchor: the issued leaf and the intermediates.
    var issued: [Certificate] { (issuedLeaf.map { [$0] } ?? []) + intermediates }

    /// CA certificates under review: the intermediates and a reviewed anchor.
    var authorities: [Certificate] { Array(intermediates) + (reviewedAnchor.map { [$0] } ?? []) }

    /// Every certificate under review: the issued leaf, the intermediates, a reviewed anchor.
    var reviewed: [Certificate] { issued + (reviewedAnchor.map { [$0] } ?? []) }
}

/// The web-PKI profile: every rule, applied in one place after OpenSSL's verification.
public enum WebPKIProfile {
    static let rules: [any ProfileRule] = [
        // Every verified chain (RFC 5280).
        SerialNumberRule(), PublicKeyRule(), ExtensionsDecodeRule(), KeyCertSignNeedsCARule(),
        NameConstraintsOnlyInCARule(), NameConstraintsWellFormedRule(), PolicyConstraintsCriticalRule(),
        CABasicConstraintsRule(), AnchorBasicConstraintsRule(), CASubjectRule(), SubjectAltNameWithEmptySubjectRule(),
        LeafDNSNamesRule(), CRLNumberRule(),
        // Web-PKI issuance (CA/Browser Forum baseline requirements).
        LeafServerAuthRule(), LeafNotCARule(), LeafCommonNameRule(), SubjectAltNameCriticalityRule(),
        AuthorityKeyIdentifierRule(), CASubjectKeyIdentifierRule(), AnchorAuthorityKeyIdentifierRule(),
        AnchorExtendedKeyUsageRule(),
        // Host names, every trust mode.
        WildcardPublicSuffixRule(),
    ]

    /// The name of every rule, in the order they run.
    public static var ruleNames: [String] { rules.map(\.name) }

    /// The failures of every rule that applies to `chain` (verified by OpenSSL, leaf first)
    /// under `policy`; empty when the chain meets them all.
    static func failures(chain: [Certificate], host: TargetHost, policy: HostPolicy) -> [Verdict.Failure] {
        guard !chain.isEmpty else { return [] }
        let anchors: ReviewedChain.Anchors
        switch policy.trust {
        case .system: anchors = .system
        case .anchors: anchors = .listed
        case .systemAndListed(_, let listed):
            // The anchor rules hold a listed anchor to them, never a root of the system store.
            anchors = chain.last.map { anchor in listed.contains { $0 == anchor } } == true ? .listed : .system
        case .pinned: anchors = .pinned
        case .none: anchors = .unverified
        }
        let crls: [RevocationList] = if case .crl(let lists) = policy.revocation { lists } else { [] }
        let reviewed = ReviewedChain(certificates: chain, anchors: anchors, host: host, crls: crls)
        var failures: [Verdict.Failure] = []
        for rule in rules where applies(rule.scope, anchors: anchors, policy: policy) {
            for problem in rule.problems(in: reviewed) {
                failures.append(.init(rule.reason, "rule \(rule.name): \(problem)"))
            }
        }
        return failures
    }

    static func applies(_ scope: RuleScope, anchors: ReviewedChain.Anchors, policy: HostPolicy) -> Bool {
        switch scope {
        case .verifiedChains: return anchors != .unverified
        case .webPKIIssuance: return (anchors == .system || anchors == .listed) && policy.requireWebPKIProfile
        case .hostNames: return policy.validateHost
        }
    }
}

extension Certificate {
    /// How a rule's detail names a certificate: its subject, or its serial when the subject is empty.
    var ruleLabel: String { hasEmptySubject ? "the certificate with serial \(serialNumber) and an empty subject" : subject }
}
