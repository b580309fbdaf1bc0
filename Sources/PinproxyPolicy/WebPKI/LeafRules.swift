import FoundationEssentials
import PinproxyCore
import PinproxyInterop

// Rules for the leaf a CA issued (not a self-signed server the operator trusts directly).

/// CA/Browser Forum 7.1.2.7.10: a TLS server certificate has an extendedKeyUsage, not critical,
/// that lists serverAuth and not anyExtendedKeyUsage. (OpenSSL accepts a leaf without one.)
struct LeafServerAuthRule: ProfileRule {
    let name = "leaf-extended-key-usage"
    let scope = RuleScope.webPKIIssuance

    func problems(in chain: ReviewedChain) -> [String] {
        guard let leaf = chain.issuedLeaf else { return [] }
        guard let usage = leaf.extendedKeyUsage else { return ["the leaf \(leaf.ruleLabel) has no extendedKeyUsage (a TLS server certificate lists serverAuth)"] }
        var problems: [String] = []
        if !usage.contains(.serverAuth) { problems.append("the extendedKeyUsage of the leaf \(leaf.ruleLabel) does not list serverAuth") }
        if usage.contains(.any) { problems.append("the extendedKeyUsage of the leaf \(leaf.ruleLabel) lists anyExtendedKeyUsage") }
        if leaf.criticality(of: .extendedKeyUsage) == true { problems.append("the leaf \(leaf.ruleLabel) has a critical extendedKeyUsage") }
        return problems
    }
}

/// CA/Browser Forum 7.1.2.7.8: a subscriber certificate has cA = FALSE. (RFC 5280 lets a CA
/// certificate stand in leaf position; the web-PKI profile does not.)
struct LeafNotCARule: ProfileRule {
    let name = "leaf-not-ca"
    let scope = RuleScope.webPKIIssuance

    func problems(in chain: ReviewedChain) -> [String] {
        guard let leaf = chain.issuedLeaf, leaf.basicConstraints?.isCA == true else { return [] }
        return ["the leaf \(leaf.ruleLabel) is a CA certificate (basicConstraints cA = TRUE)"]
    }
}

/// CA/Browser Forum 7.1.4.3: a subject commonName, if any, is one of the subjectAltNames,
/// byte for byte (an IP address in its canonical text form). pinproxy never matches the host
/// against the CN, but a CN that names something else is a misissued certificate.
struct LeafCommonNameRule: ProfileRule {
    let name = "leaf-common-name-in-san"
    let scope = RuleScope.webPKIIssuance
    let reason = RefusalReason.hostnameMismatch

    func problems(in chain: ReviewedChain) -> [String] {
        guard let leaf = chain.issuedLeaf else { return [] }
        let names = Set(leaf.subjectAltNameEntries.compactMap { entry -> String? in
            switch entry {
            case .dns(let name): return name
            case .ip(let bytes): return IPAddress(bytes: bytes)?.description
            case .other: return nil
            }
        })
        return leaf.subjectCommonNames.filter { !names.contains($0) }
            .map { "the subject CN \"\($0)\" of the leaf is not among its subjectAltNames" }
    }
}

/// CA/Browser Forum 7.1.2.7.12: with a non-empty subject, subjectAltName is not critical.
struct SubjectAltNameCriticalityRule: ProfileRule {
    let name = "san-not-critical-with-subject"
    let scope = RuleScope.webPKIIssuance

    func problems(in chain: ReviewedChain) -> [String] {
        chain.reviewed.filter { !$0.hasEmptySubject && $0.criticality(of: .subjectAltName) == true }
            .map { "\($0.ruleLabel) has a subject and a critical subjectAltName" }
    }
}

/// RFC 5280 4.2.1.10: nameConstraints belong in CA certificates only.
struct NameConstraintsOnlyInCARule: ProfileRule {
    let name = "name-constraints-only-in-ca"
    let scope = RuleScope.verifiedChains

    func problems(in chain: ReviewedChain) -> [String] {
        chain.reviewed.filter { $0.basicConstraints?.isCA != true && $0.criticality(of: .nameConstraints) != nil }
            .map { "\($0.ruleLabel) is not a CA and has nameConstraints" }
    }
}

/// RFC 5280 4.2.1.6: every dNSName of the leaf is a DNS name (a wildcard only as the whole
/// leftmost label, so no `w*.example.com`). A malformed one such as `.example.com` may slip
/// past name constraints.
struct LeafDNSNamesRule: ProfileRule {
    let name = "leaf-dns-names"
    let scope = RuleScope.verifiedChains
    let reason = RefusalReason.hostnameMismatch

    func problems(in chain: ReviewedChain) -> [String] {
        guard let leaf = chain.issuedLeaf else { return [] }
        return leaf.subjectAltNameEntries.compactMap { entry in
            guard case .dns(let name) = entry, !DNSNameSyntax.isValid(name, allowingWildcard: true) else { return nil }
            return "the leaf \(leaf.ruleLabel) has the malformed dNSName \"\(name)\""
        }
    }
}

/// A wildcard dNSName must not cover a whole public suffix (`*.co.uk`, `*.s3.amazonaws.com`):
/// such a certificate would name every site registered under it. Checked for the wildcard
/// that would match the host, so a certificate that also names the host exactly still works.
struct WildcardPublicSuffixRule: ProfileRule {
    let name = "wildcard-public-suffix"
    let scope = RuleScope.hostNames
    let reason = RefusalReason.hostnameMismatch

    func problems(in chain: ReviewedChain) -> [String] {
        guard case .name(let host) = chain.host, let dot = host.firstIndex(of: ".") else { return [] }
        let parent = host[host.index(after: dot)...]
        let names = chain.leaf.subjectAltNameEntries.compactMap { entry -> String? in
            guard case .dns(let name) = entry else { return nil }
            return name.lowercased()
        }
        guard !names.contains(host), let wildcard = names.first(where: { $0 == "*." + parent }) else { return [] }
        guard chain.publicSuffixes.isPublicSuffix(String(parent)) else { return [] }
        return ["the leaf's wildcard \"\(wildcard)\" covers the public suffix \"\(parent)\""]
    }
}

/// The syntax of a DNS name in a certificate: labels of letters, digits, hyphens and
/// underscores (found in real internal names), 1 to 63 octets each, 253 in all.
enum DNSNameSyntax {
    static func isValid(_ name: String, allowingWildcard: Bool = false, allowingEmpty: Bool = false) -> Bool {
        if name.isEmpty { return allowingEmpty }
        guard name.utf8.count <= 253 else { return false }
        var labels = name.split(separator: ".", omittingEmptySubsequences: false)
        if allowingWildcard, labels.count > 2, labels[0] == "*" { labels.removeFirst() }
        return labels.allSatisfy { label in
            (1...63).contains(label.utf8.count) && label.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                     UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
                    return true
                default:
                    return false
                }
            }
        }
    }
}
