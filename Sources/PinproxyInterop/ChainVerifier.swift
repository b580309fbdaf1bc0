import Glibc
import FoundationEssentials
import COpenSSL
import CPinproxyShims
import PinproxyCore

extension ChainProblem {
    /// True for OpenSSL's codes for a certificate's names against an issuer's name
    /// constraints (reported at the constrained certificate).
    public var isNameConstraintViolation: Bool {
        switch code {
        case X509_V_ERR_PERMITTED_VIOLATION, X509_V_ERR_EXCLUDED_VIOLATION, X509_V_ERR_SUBTREE_MINMAX,
             X509_V_ERR_UNSUPPORTED_CONSTRAINT_TYPE, X509_V_ERR_UNSUPPORTED_CONSTRAINT_SYNTAX,
             X509_V_ERR_UNSUPPORTED_NAME_SYNTAX:
            return true
        default:
            return false
        }
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
    /// One X509_verify_cert run over exactly these candidates: purpose TLS server, security
    /// level 2, the given time, partial chains when this store accepts them, and the leaf
    /// checked against `crls` when given. Verification goes on past each problem so that all
    /// are reported; a problem is not recorded when `accepting` (the caller's rule, asked with
    /// the certificate concerned) says so. Which paths to try is the caller's decision
    /// (`verify` in PinproxyPolicy).
    public func verifyPath(
        leaf: Certificate,
        intermediates: [Certificate],
        at time: Date,
        crls: [RevocationList]?,
        accepting: @escaping (ChainProblem, Certificate?) -> Bool
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

        let collector = ProblemCollector(accepting: accepting)
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
    /// The caller's rule: true for a problem that is not one (see `verifyPath`).
    private let accepting: (ChainProblem, Certificate?) -> Bool

    init(accepting: @escaping (ChainProblem, Certificate?) -> Bool) {
        self.accepting = accepting
    }

    /// The verify callback's answer to one report of OpenSSL's (`ok` 0: a problem `code` at
    /// `depth`, about `certificate`). It only ever narrows OpenSSL's decision, except where the
    /// caller's rule accepts the problem. Every other problem is recorded, which fails the
    /// verification (`ChainVerification.isVerified`), and then answered 1 only so that OpenSSL
    /// goes on and reports the rest of the chain's problems too.
    func review(ok: Int32, code: Int32, depth: Int, certificate: Certificate?) -> Int32 {
        guard ok == 0 else { return ok }
        let problem = ChainProblem(kind: ChainProblem.kind(of: code), code: code, depth: depth,
                                   message: String(cString: X509_verify_cert_error_string(Int(code))),
                                   subject: certificate?.subject ?? "")
        if accepting(problem, certificate) { return 1 }
        if !problems.contains(problem) { problems.append(problem) }
        return 1
    }
}
