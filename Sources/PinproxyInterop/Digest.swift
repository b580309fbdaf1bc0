import Glibc
import Foundation
import COpenSSL

/// SHA-256 through OpenSSL's EVP interface.
public enum SHA256 {
    /// The 32-byte SHA-256 digest of `bytes`.
    public static func hash(_ bytes: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let ok = bytes.withUnsafeBytes { input in
            EVP_Digest(input.baseAddress, input.count, &digest, &length, EVP_sha256(), nil)
        }
        precondition(ok == 1, "EVP_Digest(SHA-256) failed")
        return Array(digest.prefix(Int(length)))
    }
}
