import FoundationEssentials

/// A pin: `sha256/` followed by the standard, padded base64 of a 32-byte SHA-256 digest.
public struct Pin: Hashable, Sendable, CustomStringConvertible {
    /// The 32-byte digest.
    public let digest: [UInt8]

    /// Wraps a digest computed from a certificate.
    public init(digest: [UInt8]) {
        // Unreachable: every caller passes a `SHA256.hash` or a certificate's SHA-256, 32 bytes.
        precondition(digest.count == 32, "a SHA-256 digest has 32 bytes")
        self.digest = digest
    }

    /// Parses `sha256/BASE64`; nil for anything else (other algorithms, unpadded or URL-safe
    /// base64, a digest that is not 32 bytes, non-canonical encodings).
    public init?(_ text: String) {
        guard text.hasPrefix("sha256/") else { return nil }
        let encoded = String(decoding: text.utf8.dropFirst("sha256/".utf8.count), as: UTF8.self)
        guard encoded.utf8.count == 44,
              let data = Data(base64Encoded: encoded),
              data.count == 32,
              data.base64EncodedString() == encoded
        else { return nil }
        self.digest = Array(data)
    }

    public var description: String {
        "sha256/" + Data(digest).base64EncodedString()
    }
}
