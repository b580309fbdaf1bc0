import Glibc
import FoundationEssentials
import COpenSSL
import CPinproxyShims

extension Certificate {
    /// The public key's algorithm and size for people: `EC P-256`, `RSA 2048`, `Ed25519`.
    public var publicKeyDescription: String {
        guard let key = X509_get0_pubkey(handle) else { return "unreadable key" }
        let bits = EVP_PKEY_get_bits(key)
        switch EVP_PKEY_get_base_id(key) {
        case EVP_PKEY_RSA, EVP_PKEY_RSA_PSS: return "RSA \(bits)"
        case EVP_PKEY_EC:
            var name = [CChar](repeating: 0, count: 64)
            var length = 0
            guard EVP_PKEY_get_group_name(key, &name, name.count, &length) == 1 else { return "EC \(bits)" }
            let curve = string(fromNulTerminated: name)
            let nist = ["prime256v1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521"]
            return "EC \(nist[curve] ?? curve)"
        case EVP_PKEY_ED25519: return "Ed25519"
        case EVP_PKEY_ED448: return "Ed448"
        case EVP_PKEY_DSA: return "DSA \(bits)"
        default: return "\(String(cString: OBJ_nid2sn(EVP_PKEY_get_base_id(key)))) \(bits)"
        }
    }

    /// Whether `issuer`'s name and key identifiers match this certificate's issuer and its
    /// key verifies this certificate's signature.
    public func isIssued(by issuer: Certificate) -> Bool {
        guard X509_check_issued(issuer.handle, handle) == X509_V_OK, let key = X509_get0_pubkey(issuer.handle) else { return false }
        return X509_verify(handle, key) == 1
    }
}
