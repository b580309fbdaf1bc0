import FoundationEssentials

/// Where a Signed Certificate Timestamp came from.
public enum SCTSource: String, Sendable, Hashable, CaseIterable {
    /// In the certificate (the precertificate's SCT list extension).
    case embedded
    /// The TLS `signed_certificate_timestamp` extension of the handshake.
    case tlsExtension = "tls-extension"
    /// A stapled OCSP response's SCT list extension.
    case ocsp
}

/// One SCT as its RFC 6962 `SerializedSCT` bytes, with where it came from. Interop validates it.
public struct DeliveredSCT: Sendable, Hashable {
    public let source: SCTSource
    public let bytes: [UInt8]

    public init(source: SCTSource, bytes: [UInt8]) {
        self.source = source
        self.bytes = bytes
    }
}

/// One SCT as OpenSSL read and validated it: which log, when, where it came from, and whether
/// the log's signature over the certificate holds. Policy decides whether it counts.
public struct SCTObservation: Sendable, Equatable {
    /// What OpenSSL's validation said about the signature.
    public enum Signature: String, Sendable, Equatable {
        /// The log's signature over the certificate (or precertificate) holds.
        case valid
        /// It does not, or the SCT's timestamp is in the future.
        case invalid
        /// Not checked: the log is not in the list.
        case unknownLog = "unknown-log"
        /// Not checked: an SCT version OpenSSL does not know.
        case unknownVersion = "unknown-version"
    }

    /// SHA-256 of the log's key.
    public let logID: [UInt8]
    /// When the log promised to include the certificate (millisecond precision).
    public let timestamp: Date
    public let source: SCTSource
    public let signature: Signature

    public init(logID: [UInt8], timestamp: Date, source: SCTSource, signature: Signature) {
        (self.logID, self.timestamp, self.source, self.signature) = (logID, timestamp, source, signature)
    }
}
