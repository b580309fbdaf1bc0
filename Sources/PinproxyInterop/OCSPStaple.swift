import Glibc
import FoundationEssentials
import COpenSSL
import CPinproxyShims
import PinproxyCore

/// Reads stapled OCSP responses for a verified leaf and its issuer (Policy's `check` judges them).
public enum OCSPStaple {
    /// Reads `der` (an OCSPResponse) for `leaf`, issued by `issuer`. Only responses signed by the
    /// issuer itself are read (no delegated responders).
    public static func read(_ der: [UInt8], leaf: Certificate, issuer: Certificate) -> StapleReading {
        defer { _ = drainErrorQueue() }
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor = buffer.baseAddress
            return d2i_OCSP_RESPONSE(nil, &cursor, buffer.count)
        }
        guard let response = parsed else { return .unusable("the staple is not an OCSP response") }
        defer { OCSP_RESPONSE_free(response) }
        guard OCSP_response_status(response) == OCSP_RESPONSE_STATUS_SUCCESSFUL else {
            return .unusable("the OCSP responder answered with an error status")
        }
        guard let basic = OCSP_response_get1_basic(response) else { return .unusable("the staple has no basic response") }
        defer { OCSP_BASICRESP_free(basic) }

        // The issuer is the only signer accepted, and trusted as given: it was verified with the chain.
        let signers = pp_sk_X509_new_null()
        defer { pp_sk_X509_free(signers) }
        _ = pp_sk_X509_push(signers, issuer.handle)
        guard let store = X509_STORE_new() else { return .unusable("X509_STORE_new failed") }
        defer { X509_STORE_free(store) }
        guard OCSP_basic_verify(basic, signers, store, UInt(OCSP_TRUSTOTHER | OCSP_NOINTERN)) == 1 else {
            return .unusable("the staple is not signed by the issuer")
        }

        guard let certificateID = OCSP_cert_to_id(nil, leaf.handle, issuer.handle) else {
            return .unusable("OCSP_cert_to_id failed")
        }
        defer { OCSP_CERTID_free(certificateID) }
        var status: Int32 = 0
        var reason: Int32 = 0
        var revokedAt: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>?
        var thisUpdate: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>?
        var nextUpdate: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>?
        guard OCSP_resp_find_status(basic, certificateID, &status, &reason, &revokedAt, &thisUpdate, &nextUpdate) == 1 else {
            return .unusable("the staple does not answer for this certificate")
        }
        let answered: StapleReading.Status = switch status {
        case V_OCSP_CERTSTATUS_GOOD: .good
        case V_OCSP_CERTSTATUS_REVOKED: .revoked(since: date(from: revokedAt))
        default: .unknown
        }
        return .answer(status: answered, thisUpdate: date(from: thisUpdate), nextUpdate: date(from: nextUpdate))
    }
}
