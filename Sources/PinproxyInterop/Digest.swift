import Glibc
import FoundationEssentials
import COpenSSL

/// SHA-256 through OpenSSL's EVP interface.
public enum SHA256 {
    /// The implementation, fetched from the provider once: `EVP_sha256()` would be looked up
    /// again (under a lock) by every digest, and is what is left (a static object, never nil)
    /// when the fetch fails.
    nonisolated(unsafe) private static let algorithm: OpaquePointer = EVP_MD_fetch(nil, "SHA256", nil) ?? EVP_sha256()

    /// The 32-byte SHA-256 digest of `bytes`.
    public static func hash(_ bytes: [UInt8]) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: 32) { digest, count in
            var length: UInt32 = 0
            let ok = bytes.withUnsafeBytes { input in
                EVP_Digest(input.baseAddress, input.count, digest.baseAddress, &length, algorithm, nil)
            }
            // Fails only when OpenSSL cannot allocate; a digest it could not compute would
            // have to stand for a certificate in pins and caches, so there is none to return.
            precondition(ok == 1 && length == 32, "EVP_Digest(SHA-256) failed")
            count = 32
        }
    }
}
