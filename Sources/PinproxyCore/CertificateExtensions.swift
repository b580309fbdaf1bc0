// The shapes of the certificate fields the web-PKI rules read (Sources/PinproxyPolicy/WebPKI),
// as Interop's `Certificate` reads them through OpenSSL.

/// The X.509v3 extensions the web-PKI rules look at.
public enum CertificateExtension: Sendable, CaseIterable {
    case basicConstraints, keyUsage, extendedKeyUsage, subjectAltName, nameConstraints,
         policyConstraints, authorityKeyIdentifier, subjectKeyIdentifier
}

/// basicConstraints: whether cA is asserted and the pathLenConstraint, if any.
public struct BasicConstraints: Sendable, Equatable {
    public let isCA: Bool
    public let pathLength: Int?

    package init(isCA: Bool, pathLength: Int?) {
        self.isCA = isCA
        self.pathLength = pathLength
    }
}

/// keyUsage bits (OpenSSL's KU_* values).
public struct KeyUsage: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let digitalSignature = KeyUsage(rawValue: 0x0080)  // KU_DIGITAL_SIGNATURE
    public static let keyEncipherment = KeyUsage(rawValue: 0x0020)  // KU_KEY_ENCIPHERMENT
    public static let keyAgreement = KeyUsage(rawValue: 0x0008)  // KU_KEY_AGREEMENT
    public static let keyCertSign = KeyUsage(rawValue: 0x0004)  // KU_KEY_CERT_SIGN
    public static let cRLSign = KeyUsage(rawValue: 0x0002)  // KU_CRL_SIGN
}

/// extendedKeyUsage purposes OpenSSL knows (XKU_* values); other OIDs are not listed.
public struct ExtendedKeyUsage: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let serverAuth = ExtendedKeyUsage(rawValue: 0x1)  // XKU_SSL_SERVER
    public static let clientAuth = ExtendedKeyUsage(rawValue: 0x2)  // XKU_SSL_CLIENT
    public static let any = ExtendedKeyUsage(rawValue: 0x100)  // XKU_ANYEKU
}

/// The authorityKeyIdentifier extension's fields.
public struct AuthorityKeyIdentifier: Sendable, Equatable {
    public let keyIdentifier: [UInt8]?
    public let hasAuthorityCertIssuer: Bool
    public let hasAuthorityCertSerialNumber: Bool

    package init(keyIdentifier: [UInt8]?, hasAuthorityCertIssuer: Bool, hasAuthorityCertSerialNumber: Bool) {
        self.keyIdentifier = keyIdentifier
        self.hasAuthorityCertIssuer = hasAuthorityCertIssuer
        self.hasAuthorityCertSerialNumber = hasAuthorityCertSerialNumber
    }
}

/// What RFC 5280 4.1.2.2 asks of a serial number.
public struct SerialNumberShape: Sendable, Equatable {
    public let isNegative: Bool
    public let isZero: Bool
    /// The length of its DER encoding's contents, in octets.
    public let encodedLength: Int

    package init(isNegative: Bool, isZero: Bool, encodedLength: Int) {
        self.isNegative = isNegative
        self.isZero = isZero
        self.encodedLength = encodedLength
    }
}

/// The subject public key's algorithm and size.
public struct PublicKeyShape: Sendable, Equatable {
    public enum Algorithm: Sendable, Equatable { case rsa, dsa, ec, ed25519, ed448, other }
    public let algorithm: Algorithm
    public let bits: Int

    package init(algorithm: Algorithm, bits: Int) {
        self.algorithm = algorithm
        self.bits = bits
    }
}
