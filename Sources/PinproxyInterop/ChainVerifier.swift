import Glibc
import Foundation
import COpenSSL
import CPinproxyShims

/// One problem OpenSSL found while building and verifying a chain.
public struct ChainProblem: Sendable, Hashable, CustomStringConvertible {
    /// The class of problem, independent of OpenSSL's numbering.
    public enum Kind: Sendable, Hashable {
        case expired, notYetValid, revoked, revocationUnknown, untrusted
    }

    public let kind: Kind
    /// OpenSSL's X509_V_ERR_* code.
    public let code: Int32
    /// Position in the chain, 0 being the leaf.
    public let depth: Int
    /// OpenSSL's text for the code.
    public let message: String
    /// The subject of the certificate concerned, when OpenSSL names one.
    public let subject: String

    public var description: String {
        subject.isEmpty ? "\(message) (depth \(depth))" : "\(message) (depth \(depth): \(subject))"
    }

    static func kind(of code: Int32) -> Kind {
        switch code {
        case X509_V_ERR_CERT_HAS_EXPIRED:
            return .expired
        case X509_V_ERR_CERT_NOT_YET_VALID:
            return .notYetValid
        case X509_V_ERR_CERT_REVOKED:
            return .revoked
        case X509_V_ERR_UNABLE_TO_GET_CRL, X509_V_ERR_CRL_HAS_EXPIRED, X509_V_ERR_CRL_NOT_YET_VALID,
             X509_V_ERR_CRL_SIGNATURE_FAILURE, X509_V_ERR_UNABLE_TO_DECRYPT_CRL_SIGNATURE,
             X509_V_ERR_ERROR_IN_CRL_LAST_UPDATE_FIELD, X509_V_ERR_ERROR_IN_CRL_NEXT_UPDATE_FIELD,
             X509_V_ERR_UNABLE_TO_GET_CRL_ISSUER, X509_V_ERR_KEYUSAGE_NO_CRL_SIGN,
             X509_V_ERR_DIFFERENT_CRL_SCOPE, X509_V_ERR_UNHANDLED_CRITICAL_CRL_EXTENSION,
             X509_V_ERR_CRL_PATH_VALIDATION_ERROR:
            return .revocationUnknown
        default:
            return .untrusted
        }
    }
}

/// What OpenSSL built and what it found wrong with it.
public struct ChainVerification: Sendable {
    /// The chain OpenSSL built from the leaf towards an anchor, leaf first. When `problems`
    /// is empty this is the verified chain.
    public let chain: [Certificate]
    /// Every problem reported, in the order OpenSSL found them.
    public let problems: [ChainProblem]

    /// True when OpenSSL verified the chain without any problem.
    public var isVerified: Bool { problems.isEmpty && !chain.isEmpty }
}

extension TrustStore {
    /// At most this many extra path-building attempts per verification (see `verify`).
    static let alternativePathAttempts = 8

    /// Builds and verifies a chain for `leaf` with X509_verify_cert: purpose TLS server,
    /// security level 2, the given time, partial chains when this store accepts them, and the leaf checked against
    /// `crls` when given. Verification goes on past each problem so that all are reported.
    ///
    /// OpenSSL builds one path and does not backtrack. When that path has a problem at a
    /// presented intermediate (a name-constraint violation, an issuer that leads nowhere), the
    /// path is built again without that intermediate, up to `alternativePathAttempts` times;
    /// the first path OpenSSL verifies without a problem wins. Every path tried is verified in
    /// full, so leaving candidates out can only find another valid path, never accept an
    /// invalid one. When none verifies, the first path's problems are reported.
    ///
    /// A chain that verified is remembered (`VerifiedChains`) for the same certificates and
    /// CRLs, and given again while the time stays within every certificate's and CRL's
    /// validity: a resumed connection presents its server's chain again, and X509_verify_cert
    /// would repeat the same signature checks with the same outcome.
    public func verify(
        leaf: Certificate,
        intermediates: [Certificate],
        at time: Date,
        crls: [RevocationList]? = nil
    ) -> ChainVerification {
        let key = VerifiedChains.Key(leaf: leaf, intermediates: intermediates, crls: crls)
        if let known = verifiedChains.result(for: key, at: time) { return known }
        let result = verifyUncached(leaf: leaf, intermediates: intermediates, at: time, crls: crls)
        if result.isVerified { verifiedChains.remember(result, for: key, crls: crls ?? [], at: time) }
        return result
    }

    private func verifyUncached(
        leaf: Certificate,
        intermediates: [Certificate],
        at time: Date,
        crls: [RevocationList]?
    ) -> ChainVerification {
        let first = verifyOnePath(leaf: leaf, intermediates: intermediates, at: time, crls: crls)
        guard !first.isVerified else { return first }
        var pending = Self.alternatives(after: first, candidates: intermediates)
        var tried: Set<[[UInt8]]> = [intermediates.map(\.certificateSHA256)]
        var attempts = 0
        while attempts < Self.alternativePathAttempts, let candidates = pending.popLast() {
            guard tried.insert(candidates.map(\.certificateSHA256)).inserted else { continue }
            attempts += 1
            let result = verifyOnePath(leaf: leaf, intermediates: candidates, at: time, crls: crls)
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
            let depths = isNameConstraintProblem(problem.code)
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

    /// OpenSSL's codes for a certificate's names against an issuer's name constraints.
    private static func isNameConstraintProblem(_ code: Int32) -> Bool {
        switch code {
        case X509_V_ERR_PERMITTED_VIOLATION, X509_V_ERR_EXCLUDED_VIOLATION, X509_V_ERR_SUBTREE_MINMAX,
             X509_V_ERR_UNSUPPORTED_CONSTRAINT_TYPE, X509_V_ERR_UNSUPPORTED_CONSTRAINT_SYNTAX,
             X509_V_ERR_UNSUPPORTED_NAME_SYNTAX:
            return true
        default:
            return false
        }
    }

    /// One X509_verify_cert run over exactly these candidates.
    private func verifyOnePath(
        leaf: Certificate,
        intermediates: [Certificate],
        at time: Date,
        crls: [RevocationList]?
    ) -> ChainVerification {
        guard let context = X509_STORE_CTX_new() else {
            return ChainVerification(chain: [], problems: [Self.internalProblem("X509_STORE_CTX_new")])
        }
        defer { X509_STORE_CTX_free(context) }

        let untrusted = pp_sk_X509_new_null()
        defer { pp_sk_X509_free(untrusted) }
        for certificate in intermediates { _ = pp_sk_X509_push(untrusted, certificate.handle) }

        guard X509_STORE_CTX_init(context, handle, leaf.handle, untrusted) == 1 else {
            return ChainVerification(chain: [], problems: [Self.internalProblem("X509_STORE_CTX_init")])
        }

        let crlStack = pp_sk_X509_CRL_new_null()
        defer { pp_sk_X509_CRL_free(crlStack) }
        var flags = UInt(0)
        if acceptsPartialChains { flags |= UInt(X509_V_FLAG_PARTIAL_CHAIN) }
        if let crls {
            for crl in crls { _ = pp_sk_X509_CRL_push(crlStack, crl.handle) }
            X509_STORE_CTX_set0_crls(context, crlStack)
            flags |= UInt(X509_V_FLAG_CRL_CHECK)
        }

        let parameters = X509_STORE_CTX_get0_param(context)
        X509_VERIFY_PARAM_set_flags(parameters, flags)
        X509_VERIFY_PARAM_set_purpose(parameters, X509_PURPOSE_SSL_SERVER)
        // Security level 2: no RSA, DSA or DH key under 2048 bits, no EC key under 224 bits.
        X509_VERIFY_PARAM_set_auth_level(parameters, 2)
        // pinproxy never matches the host against the subject CN, so the CN plays no part in
        // the name check and must not be held against the name constraints either: OpenSSL
        // 3.0 checks a host-like CN of a leaf without DNS SAN against them unless told not to.
        X509_VERIFY_PARAM_set_hostflags(parameters, UInt32(X509_CHECK_FLAG_NEVER_CHECK_SUBJECT))
        let second = time.timeIntervalSince1970.rounded(.down)
        X509_VERIFY_PARAM_set_time(parameters, time_t(second))

        let collector = ProblemCollector(validationSecond: Date(timeIntervalSince1970: second))
        let unmanaged = Unmanaged.passRetained(collector)
        defer { unmanaged.release() }
        _ = pp_X509_STORE_CTX_set_app_data(context, unmanaged.toOpaque())
        X509_STORE_CTX_set_verify_cb(context, Self.verifyCallback)

        let status = X509_verify_cert(context)
        var problems = collector.problems
        if status != 1 && problems.isEmpty {
            problems.append(Self.internalProblem("X509_verify_cert"))
        }
        _ = drainErrorQueue()

        var chain: [Certificate] = []
        if let built = X509_STORE_CTX_get1_chain(context) {
            for index in 0..<pp_sk_X509_num(built) {
                if let cert = pp_sk_X509_value(built, index) { chain.append(Certificate(retaining: cert)) }
            }
            pp_sk_X509_pop_free(built)
        }
        return ChainVerification(chain: chain, problems: problems)
    }

    /// X509_verify_cert's verify callback: hands each report to the verification's
    /// `ProblemCollector` (the context's app data). Without a context or a collector nothing can
    /// be recorded, so it refuses whatever OpenSSL said.
    static let verifyCallback: @convention(c) (Int32, OpaquePointer?) -> Int32 = { ok, context in
        guard let context, let data = pp_X509_STORE_CTX_get_app_data(context) else { return 0 }
        let collector = Unmanaged<ProblemCollector>.fromOpaque(data).takeUnretainedValue()
        return collector.review(ok: ok, code: X509_STORE_CTX_get_error(context),
                                depth: Int(X509_STORE_CTX_get_error_depth(context)),
                                certificate: X509_STORE_CTX_get_current_cert(context).map { Certificate(retaining: $0) })
    }

    private static func internalProblem(_ operation: String) -> ChainProblem {
        let messages = drainErrorQueue()
        return ChainProblem(kind: .untrusted, code: -1, depth: 0,
                            message: ([operation + " failed"] + messages).joined(separator: "; "), subject: "")
    }
}

/// Receives problems from the C verify callback; used by one verification on one thread.
final class ProblemCollector {
    private(set) var problems: [ChainProblem] = []
    /// The validation time, truncated to whole seconds (validity is stated in seconds).
    let validationSecond: Date

    init(validationSecond: Date) {
        self.validationSecond = validationSecond
    }

    /// The verify callback's answer to one report of OpenSSL's (`ok` 0: a problem `code` at
    /// `depth`, about `certificate`). It only ever narrows OpenSSL's decision, with one exception:
    /// RFC 5280 4.1.2.5 makes notAfter inclusive, to the second, where OpenSSL counts a certificate
    /// as expired from its notAfter second on, so `X509_V_ERR_CERT_HAS_EXPIRED` within that second
    /// is accepted. Every other problem is recorded, which fails the verification
    /// (`ChainVerification.isVerified`), and then answered 1 only so that OpenSSL goes on and
    /// reports the rest of the chain's problems too.
    func review(ok: Int32, code: Int32, depth: Int, certificate: Certificate?) -> Int32 {
        guard ok == 0 else { return ok }
        if code == X509_V_ERR_CERT_HAS_EXPIRED, let certificate, certificate.notAfter >= validationSecond {
            return 1
        }
        let problem = ChainProblem(kind: ChainProblem.kind(of: code), code: code, depth: depth,
                                   message: String(cString: X509_verify_cert_error_string(Int(code))),
                                   subject: certificate?.subject ?? "")
        if !problems.contains(problem) { problems.append(problem) }
        return 1
    }
}

/// The chains one `TrustStore` has verified, so that the same chain (a resumed connection's,
/// or the next client's of the same server) is not verified again while nothing that decided
/// it has changed. Keyed by the SHA-256 of every presented certificate, in order, and of every
/// CRL; an entry answers only while the time is strictly inside every certificate's validity
/// and every CRL's update window, and for `lifetime` at most. Only verified chains are kept:
/// a failure is always worked out afresh, with all its problems. A reload builds new stores,
/// and so starts empty.
final class VerifiedChains: Sendable {
    struct Key: Hashable, Sendable {
        let certificates: [[UInt8]]
        let crls: [[UInt8]]?

        init(leaf: Certificate, intermediates: [Certificate], crls: [RevocationList]?) {
            certificates = ([leaf] + intermediates).map(\.certificateSHA256)
            self.crls = crls?.map(\.sha256)
        }
    }

    private struct Entry: Sendable {
        let result: ChainVerification
        /// The validation second must be after this and before `validUntil`.
        let validAfter: Date
        let validUntil: Date
        let expires: TimeInterval
    }

    private let entries = Locked<[Key: Entry]>([:])
    /// Entries per store; when full, the store forgets them all and starts again.
    static let capacity = 1024
    /// How long an entry answers at most (monotonic seconds).
    static let lifetime: TimeInterval = 300

    func result(for key: Key, at time: Date) -> ChainVerification? {
        let second = Date(timeIntervalSince1970: time.timeIntervalSince1970.rounded(.down))
        let now = ProcessLimits.monotonicSeconds()
        return entries.withLock { entries -> ChainVerification? in
            guard let entry = entries[key] else { return nil }
            guard now < entry.expires else {
                entries[key] = nil
                return nil
            }
            return entry.validAfter < second && second < entry.validUntil ? entry.result : nil
        }
    }

    func remember(_ result: ChainVerification, for key: Key, crls: [RevocationList], at time: Date) {
        let presented = result.chain
        var validAfter = presented.map(\.notBefore).max() ?? .distantFuture
        var validUntil = presented.map(\.notAfter).min() ?? .distantPast
        for crl in crls {
            validAfter = max(validAfter, crl.lastUpdate ?? .distantFuture)
            validUntil = min(validUntil, crl.nextUpdate ?? validUntil)
        }
        let entry = Entry(result: result, validAfter: validAfter, validUntil: validUntil,
                          expires: ProcessLimits.monotonicSeconds() + Self.lifetime)
        entries.withLock { entries in
            if entries.count >= Self.capacity { entries.removeAll() }
            entries[key] = entry
        }
    }
}
