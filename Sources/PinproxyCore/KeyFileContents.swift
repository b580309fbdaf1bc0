/// The public key found in a key file: a SubjectPublicKeyInfo (PEM `PUBLIC KEY` or DER), or
/// the public half of an unencrypted private key (PEM or DER; PKCS#8 or traditional). The
/// private part is dropped as soon as the file is parsed (Interop's `KeyFileContents.parse`).
public struct KeyFileContents: Sendable {
    /// Whether the file held a private key.
    public let wasPrivate: Bool
    /// The DER SubjectPublicKeyInfo.
    public let subjectPublicKeyInfoDER: [UInt8]
    /// e.g. `EC P-256`, `RSA 3072`, `ED25519`.
    public let algorithm: String

    package init(wasPrivate: Bool, subjectPublicKeyInfoDER: [UInt8], algorithm: String) {
        self.wasPrivate = wasPrivate
        self.subjectPublicKeyInfoDER = subjectPublicKeyInfoDER
        self.algorithm = algorithm
    }
}
