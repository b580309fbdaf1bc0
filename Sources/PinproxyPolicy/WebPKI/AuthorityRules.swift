import FoundationEssentials
import PinproxyInterop
import PinproxyCore

// Rules for the CA certificates under review: intermediates, and a listed anchor.

/// RFC 5280 4.2.1.9: a CA certificate carries basicConstraints, critical, with cA = TRUE.
/// OpenSSL checks cA for intermediates, not the criticality.
struct CABasicConstraintsRule: ProfileRule {
    let name = "ca-basic-constraints"
    let scope = RuleScope.verifiedChains

    func problems(in chain: ReviewedChain) -> [String] {
        chain.intermediates.compactMap(basicConstraintsProblem)
    }
}

/// The same for a listed anchor, which OpenSSL accepts without the extension. Relaxable:
/// some roots still trusted (ePKI, Go Daddy Class 2) mark it non-critical.
struct AnchorBasicConstraintsRule: ProfileRule {
    let name = "anchor-basic-constraints"
    let scope = RuleScope.webPKIIssuance

    func problems(in chain: ReviewedChain) -> [String] {
        chain.reviewedAnchor.flatMap(basicConstraintsProblem).map { [$0] } ?? []
    }
}

private func basicConstraintsProblem(_ certificate: Certificate) -> String? {
    guard let constraints = certificate.basicConstraints else { return "the CA \(certificate.ruleLabel) has no basicConstraints" }
    if !constraints.isCA { return "the CA \(certificate.ruleLabel) has basicConstraints cA = FALSE" }
    if certificate.criticality(of: .basicConstraints) != true { return "the CA \(certificate.ruleLabel) has a non-critical basicConstraints" }
    return nil
}

/// RFC 5280 4.1.2.6: a CA certificate has a non-empty subject (it is some certificate's issuer).
struct CASubjectRule: ProfileRule {
    let name = "ca-subject"
    let scope = RuleScope.verifiedChains

    func problems(in chain: ReviewedChain) -> [String] {
        chain.authorities.filter(\.hasEmptySubject).map { "the CA \($0.ruleLabel) has an empty subject" }
    }
}

/// RFC 5280 4.2.1.11: policyConstraints must be critical.
struct PolicyConstraintsCriticalRule: ProfileRule {
    let name = "policy-constraints-critical"
    let scope = RuleScope.verifiedChains

    func problems(in chain: ReviewedChain) -> [String] {
        chain.authorities.filter { $0.criticality(of: .policyConstraints) == false }
            .map { "the CA \($0.ruleLabel) has a non-critical policyConstraints" }
    }
}

/// RFC 5280 4.2.1.10: nameConstraints names at least one subtree, and every dNSName in it is a
/// DNS name (no leading period: OpenSSL reads `.example.com` as a suffix match). A
/// non-critical nameConstraints is accepted, as the web-PKI profile does.
struct NameConstraintsWellFormedRule: ProfileRule {
    let name = "name-constraints-well-formed"
    let scope = RuleScope.verifiedChains

    func problems(in chain: ReviewedChain) -> [String] {
        chain.authorities.flatMap { certificate -> [String] in
            guard certificate.criticality(of: .nameConstraints) != nil else { return [] }
            var problems: [String] = []
            // An undecodable extension is reported by extensions-decode.
            guard let constraints = certificate.nameConstraints else { return problems }
            let subtrees = ((constraints.permitted ?? []) + (constraints.excluded ?? [])).map(\.base)
            if subtrees.isEmpty { problems.append("the CA \(certificate.ruleLabel) has a nameConstraints with no subtree") }
            for case .dns(let name) in subtrees where !DNSNameSyntax.isValid(name, allowingEmpty: true) {
                problems.append("the CA \(certificate.ruleLabel) constrains the malformed DNS name \"\(name)\"")
            }
            return problems
        }
    }
}

/// CA/Browser Forum 7.1.2.1 and 7.1.2.2, RFC 5280 4.2.1.2: a CA certificate carries a
/// subjectKeyIdentifier.
struct CASubjectKeyIdentifierRule: ProfileRule {
    let name = "ca-subject-key-identifier"
    let scope = RuleScope.webPKIIssuance

    func problems(in chain: ReviewedChain) -> [String] {
        chain.authorities.filter { $0.subjectKeyIdentifier == nil }.map { "the CA \($0.ruleLabel) has no subjectKeyIdentifier" }
    }
}

/// RFC 5280 4.2.1.1: every certificate a CA issued below the anchor names its issuer's key in
/// authorityKeyIdentifier.keyIdentifier. (An anchor's own issuer is not part of the path.)
struct AuthorityKeyIdentifierRule: ProfileRule {
    let name = "authority-key-identifier"
    let scope = RuleScope.webPKIIssuance

    func problems(in chain: ReviewedChain) -> [String] {
        chain.issued.filter { $0.authorityKeyIdentifier?.keyIdentifier == nil }
            .map { "\($0.ruleLabel) has no authorityKeyIdentifier keyIdentifier" }
    }
}

/// CA/Browser Forum 7.1.2.1.3: a root's authorityKeyIdentifier, when present, holds only a
/// keyIdentifier, equal to its subjectKeyIdentifier.
struct AnchorAuthorityKeyIdentifierRule: ProfileRule {
    let name = "anchor-authority-key-identifier"
    let scope = RuleScope.webPKIIssuance

    func problems(in chain: ReviewedChain) -> [String] {
        guard let anchor = chain.reviewedAnchor, anchor.isSelfIssued, let identifier = anchor.authorityKeyIdentifier else { return [] }
        var problems: [String] = []
        if identifier.hasAuthorityCertIssuer || identifier.hasAuthorityCertSerialNumber {
            problems.append("the root \(anchor.ruleLabel) has an authorityKeyIdentifier with an issuer or serial number")
        }
        if identifier.keyIdentifier == nil {
            problems.append("the root \(anchor.ruleLabel) has an authorityKeyIdentifier without keyIdentifier")
        } else if identifier.keyIdentifier != anchor.subjectKeyIdentifier {
            problems.append("the root \(anchor.ruleLabel) has an authorityKeyIdentifier that differs from its subjectKeyIdentifier")
        }
        return problems
    }
}

/// CA/Browser Forum 7.1.2.1.2: a root certificate carries no extendedKeyUsage.
struct AnchorExtendedKeyUsageRule: ProfileRule {
    let name = "anchor-extended-key-usage"
    let scope = RuleScope.webPKIIssuance

    func problems(in chain: ReviewedChain) -> [String] {
        guard let anchor = chain.reviewedAnchor, anchor.isSelfIssued, anchor.criticality(of: .extendedKeyUsage) != nil else { return [] }
        return ["the root \(anchor.ruleLabel) has an extendedKeyUsage"]
    }
}
