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

/// Standard, padded base64 through OpenSSL's block coder (`EVP_DecodeBlock`, `EVP_EncodeBlock`).
public enum CanonicalBase64 {
    /// The bytes `text` encodes, when `text` is exactly their encoding: the standard alphabet,
    /// padded, nothing else (no whitespace, no line breaks, no bits set past the data). Texts
    /// over 4 KiB are refused.
    public static func decode(_ text: ArraySlice<UInt8>) -> [UInt8]? {
        guard !text.isEmpty, text.count % 4 == 0, text.count <= 4096 else { return nil }
        let padding = text.last != UInt8(ascii: "=") ? 0 : text.dropLast().last != UInt8(ascii: "=") ? 1 : 2
        // The block coder writes a zero byte for each `=`: the padding is cut off afterwards.
        var decoded = [UInt8](repeating: 0, count: text.count / 4 * 3)
        let written = text.withUnsafeBufferPointer { EVP_DecodeBlock(&decoded, $0.baseAddress, Int32($0.count)) }
        guard written == Int32(decoded.count) else { return nil }
        decoded.removeLast(padding)
        // Any text that is not the canonical encoding (whitespace the decoder skipped, `=`
        // inside, stray bits in the last character) encodes back to different text.
        let matches = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: text.count + 1) { encoded in
            let length = EVP_EncodeBlock(encoded.baseAddress, decoded, Int32(decoded.count))
            return length == Int32(text.count) && encoded.prefix(text.count).elementsEqual(text)
        }
        return matches ? decoded : nil
    }
}
