import FoundationEssentials
import PinproxyCore
import PinproxyInterop

/// What pinproxy asks of OpenSSL's chain building beyond one X509_verify_cert run.
extension TrustStore {
    /// At most this many extra path-building attempts per verification (see `verify`).
    static let alternativePathAttempts = 8

    /// Builds and verifies a chain for `leaf` with OpenSSL (`verifyPath`), under pinproxy's
    /// rules: which paths to try, and the one problem OpenSSL reports that is none
    /// (`ChainRules.acceptsExpiry`).
    ///
    /// OpenSSL builds one path and does not backtrack. When that path has a problem at a
    /// presented intermediate (a name-constraint violation, an issuer that leads nowhere), the
    /// path is built again without that intermediate, up to `alternativePathAttempts` times;
    /// the first path OpenSSL verifies without a problem wins. Every path tried is verified in
    /// full, so leaving candidates out can only find another valid path, never accept an
    /// invalid one. When none verifies, the first path's problems are reported.
    ///
    /// A chain that verified is remembered in `memory`, when given (`VerifiedChains`), for this
    /// store and the same certificates and CRLs, and given again while the time stays within
    /// every certificate's and CRL's validity: a resumed connection presents its server's chain
    /// again, and X509_verify_cert would repeat the same signature checks with the same outcome.
    public func verify(
        leaf: Certificate,
        intermediates: [Certificate],
        at time: Date,
        crls: [RevocationList]? = nil,
        remembering memory: VerifiedChains? = nil
    ) -> ChainVerification {
        guard let memory else { return verifyUncached(leaf: leaf, intermediates: intermediates, at: time, crls: crls) }
        let key = VerifiedChains.Key(leaf: leaf, intermediates: intermediates, crls: crls)
        if let known = memory.result(for: key, in: self, at: time) { return known }
        let result = verifyUncached(leaf: leaf, intermediates: intermediates, at: time, crls: crls)
        if result.isVerified { memory.remember(result, for: key, in: self, crls: crls ?? [], at: time) }
        return result
    }

    private func verifyUncached(
        leaf: Certificate,
        intermediates: [Certificate],
        at time: Date,
        crls: [RevocationList]?
    ) -> ChainVerification {
        let validationSecond = Date(timeIntervalSince1970: time.timeIntervalSince1970.rounded(.down))
        let accepting = { ChainRules.acceptsExpiry($0, of: $1, validationSecond: validationSecond) }
        let first = verifyPath(leaf: leaf, intermediates: intermediates, at: time, crls: crls, accepting: accepting)
        guard !first.isVerified else { return first }
        var pending = Self.alternatives(after: first, candidates: intermediates)
        var tried: Set<[[UInt8]]> = [intermediates.map(\.certificateSHA256)]
        var attempts = 0
        while attempts < Self.alternativePathAttempts, let candidates = pending.popLast() {
            guard tried.insert(candidates.map(\.certificateSHA256)).inserted else { continue }
            attempts += 1
            let result = verifyPath(leaf: leaf, intermediates: candidates, at: time, crls: crls, accepting: accepting)
            if result.isVerified { return result }
            pending += Self.alternatives(after: result, candidates: candidates)
        }
        return first
    }

    /// The candidate sets to try after a failed path: each leaves out one presented
    /// intermediate that may be why the path failed — the certificate at the depth of a
    /// problem or, for a name-constraint violation (reported at the constrained certificate),
    /// each certificate above it on the path that carries name constraints.
    private static func alternatives(after failed: ChainVerification, candidates: [Certificate]) -> [[Certificate]] {
        var culprits: [Certificate] = []
        for problem in failed.problems.sorted(by: { $0.depth < $1.depth }) {
            let depths = problem.isNameConstraintViolation
                ? Array((problem.depth + 1)..<max(problem.depth + 1, failed.chain.count)).filter {
                    failed.chain[$0].criticality(of: .nameConstraints) != nil
                }
                : [problem.depth]
            for depth in depths where depth > 0 && depth < failed.chain.count {
                let culprit = failed.chain[depth]
                if candidates.contains(culprit) && !culprits.contains(culprit) { culprits.append(culprit) }
            }
        }
        // Tried last first (the list is a stack): the culprit nearest the leaf goes first.
        return culprits.reversed().map { culprit in candidates.filter { $0 != culprit } }
    }
}

/// The verify callback's rules (see `TrustStore.verifyPath`).
enum ChainRules {
    /// RFC 5280 4.1.2.5 makes notAfter inclusive, to the second, where OpenSSL counts a
    /// certificate as expired from its notAfter second on: an expiry reported within that second
    /// (`validationSecond`, the validation time truncated to whole seconds) is no problem. This
    /// is the only problem OpenSSL reports that is accepted; an expiry about no certificate is not.
    static func acceptsExpiry(_ problem: ChainProblem, of certificate: Certificate?, validationSecond: Date) -> Bool {
        guard problem.kind == .expired, let certificate else { return false }
        return certificate.notAfter >= validationSecond
    }
}
