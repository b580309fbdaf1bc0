/// Issues the certificates of pinproxy's local interception CA (Interop builds them with OpenSSL).
public enum CertificateBuilder {
    /// The name a minted leaf is for.
    public enum SubjectName: Sendable {
        case dns(String)
        case ip(IPAddress)
    }
}
