import FoundationEssentials
import PinproxyInterop

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
        // As bytes (one copy, no strings made): a config may hold 200,000 pins.
        let bytes = Array(text.utf8)
        guard bytes.count == Self.prefix.count + 44, bytes.starts(with: Self.prefix),
              let digest = CanonicalBase64.decode(bytes[Self.prefix.count...]), digest.count == 32
        else { return nil }
        self.digest = digest
    }

    private static let prefix = Array("sha256/".utf8)

    public var description: String {
        "sha256/" + Data(digest).base64EncodedString()
    }
}
