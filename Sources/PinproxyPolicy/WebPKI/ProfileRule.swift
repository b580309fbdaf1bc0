import FoundationEssentials
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

/// Which chains a rule applies to (docs/trust-decisions.md).
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
    /// The list loaded with the config the entry belongs to.
    let publicSuffixes: PublicSuffixList

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

    /// The rules that apply under `policy` to `chain` (verified by OpenSSL, leaf first; empty
    /// when no chain was verified), in the order they run.
    static func applicableRules(policy: HostPolicy, chain: [Certificate]) -> [any ProfileRule] {
        let anchors = anchors(policy: policy, chain: chain)
        return rules.filter { applies($0.scope, anchors: anchors, policy: policy) }
    }

    /// The result of each of `rules` on `chain` (verified by OpenSSL, leaf first); each failure
    /// names its rule.
    static func checks(_ rules: [any ProfileRule], chain: [Certificate], host: TargetHost, policy: HostPolicy,
                       publicSuffixes: PublicSuffixList) -> [CheckResult] {
        guard !chain.isEmpty else { return rules.map { CheckResult(.rule($0.name), .notReached) } }
        let crls: [RevocationList] = if case .crl(let lists) = policy.revocation { lists } else { [] }
        let reviewed = ReviewedChain(certificates: chain, anchors: anchors(policy: policy, chain: chain), host: host, crls: crls,
                                     publicSuffixes: publicSuffixes)
        return rules.map { rule in
            CheckResult(.rule(rule.name), found: rule.problems(in: reviewed).map { .init(rule.reason, "rule \(rule.name): \($0)") })
        }
    }

    /// Where the anchor of `chain` comes from under `policy`.
    static func anchors(policy: HostPolicy, chain: [Certificate]) -> ReviewedChain.Anchors {
        switch policy.trust {
        case .system: return .system
        case .anchors: return .listed
        case .systemAndListed(_, let listed):
            // The anchor rules hold a listed anchor to them, never a root of the system store.
            return chain.last.map { anchor in listed.contains { $0 == anchor } } == true ? .listed : .system
        case .pinned: return .pinned
        case .none: return .unverified
        }
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
