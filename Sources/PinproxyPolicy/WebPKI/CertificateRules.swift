import FoundationEssentials
import PinproxyInterop
import PinproxyCore

// RFC 5280 rules for every certificate under review (leaf, intermediates, a listed anchor).

/// RFC 5280 4.1.2.2: a serial number is a positive integer of at most 20 octets. Checked on
/// the leaf (a directly trusted one too) and the intermediates, not on roots: long-trusted
/// roots (Starfield and Go Daddy G2) have the serial number 0.
struct SerialNumberRule: ProfileRule {
    let name = "serial-number"
    let scope = RuleScope.verifiedChains

    func problems(in chain: ReviewedChain) -> [String] {
        ([chain.leaf] + chain.intermediates).compactMap { certificate in
            let serial = certificate.serialNumberShape
            if serial.isNegative { return "\(certificate.ruleLabel) has a negative serial number" }
            if serial.isZero { return "\(certificate.ruleLabel) has the serial number 0" }
            if serial.encodedLength > 20 { return "\(certificate.ruleLabel) has a serial number of \(serial.encodedLength) octets (at most 20)" }
            return nil
        }
    }
}

/// CA/Browser Forum 6.1.5: no DSA keys, and an RSA modulus whose size is a multiple of 8 bits
/// (OpenSSL's security level 2 already refuses RSA under 2048 bits). Applies to the leaf in
/// every verified chain, self-signed or not.
struct PublicKeyRule: ProfileRule {
    let name = "public-key"
    let scope = RuleScope.verifiedChains

    func problems(in chain: ReviewedChain) -> [String] {
        let certificates = chain.issuedLeaf == nil ? [chain.leaf] + chain.authorities : chain.reviewed
        return certificates.compactMap { certificate in
            guard let key = certificate.publicKeyShape else { return "the public key of \(certificate.ruleLabel) cannot be decoded" }
            switch key.algorithm {
            case .dsa: return "\(certificate.ruleLabel) has a DSA key"
            case .rsa: return key.bits % 8 != 0 ? "\(certificate.ruleLabel) has an RSA modulus of \(key.bits) bits, not a multiple of 8" : nil
            case .ec, .ed25519, .ed448, .other: return nil
            }
        }
    }
}

/// RFC 5280 4.2: every extension OpenSSL knows must decode (a malformed authorityInfoAccess is
/// not looked at during verification, so OpenSSL lets it through).
struct ExtensionsDecodeRule: ProfileRule {
    let name = "extensions-decode"
    let scope = RuleScope.verifiedChains

    func problems(in chain: ReviewedChain) -> [String] {
        chain.reviewed.flatMap { certificate in
            certificate.undecodableExtensions.map { "\(certificate.ruleLabel) has a malformed \($0) extension" }
        }
    }
}

/// RFC 5280 4.2.1.3 and 4.2.1.9: keyCertSign may be asserted only with cA = TRUE.
struct KeyCertSignNeedsCARule: ProfileRule {
    let name = "key-cert-sign-needs-ca"
    let scope = RuleScope.verifiedChains

    func problems(in chain: ReviewedChain) -> [String] {
        chain.reviewed.compactMap { certificate in
            guard let usage = certificate.keyUsage, usage.contains(.keyCertSign), certificate.basicConstraints?.isCA != true else { return nil }
            return "\(certificate.ruleLabel) asserts keyCertSign without basicConstraints cA = TRUE"
        }
    }
}

/// RFC 5280 4.2.1.6: with an empty subject, the subjectAltName carries the identity and must be critical.
struct SubjectAltNameWithEmptySubjectRule: ProfileRule {
    let name = "san-critical-with-empty-subject"
    let scope = RuleScope.verifiedChains

    func problems(in chain: ReviewedChain) -> [String] {
        chain.reviewed.compactMap { certificate in
            guard certificate.hasEmptySubject else { return nil }
            switch certificate.criticality(of: .subjectAltName) {
            case .none: return "\(certificate.ruleLabel) has neither a subject nor a subjectAltName"
            case .some(false): return "\(certificate.ruleLabel) has an empty subject and a non-critical subjectAltName"
            case .some(true): return nil
            }
        }
    }
}

/// RFC 5280 5.2.3: a CRL carries its cRLNumber; one without it is not a conforming CRL, and the
/// revocation status it gives is not used.
struct CRLNumberRule: ProfileRule {
    let name = "crl-number"
    let scope = RuleScope.verifiedChains
    let reason = RefusalReason.revocationUnknown

    func problems(in chain: ReviewedChain) -> [String] {
        chain.crls.filter { !$0.hasCRLNumber }.map { "the CRL of \($0.issuer) has no cRLNumber" }
    }
}
