/// One problem OpenSSL found while building and verifying a chain.
public struct ChainProblem: Sendable, Hashable, CustomStringConvertible {
    /// The class of problem, independent of OpenSSL's numbering.
    public enum Kind: Sendable, Hashable {
        case expired, notYetValid, revoked, revocationUnknown, untrusted
    }

    public let kind: Kind
    /// OpenSSL's X509_V_ERR_* code.
    public let code: Int32
    /// Position in the chain, 0 being the leaf.
    public let depth: Int
    /// OpenSSL's text for the code.
    public let message: String
    /// The subject of the certificate concerned, when OpenSSL names one.
    public let subject: String

    package init(kind: Kind, code: Int32, depth: Int, message: String, subject: String) {
        self.kind = kind
        self.code = code
        self.depth = depth
        self.message = message
        self.subject = subject
    }

    public var description: String {
        subject.isEmpty ? "\(message) (depth \(depth))" : "\(message) (depth \(depth): \(subject))"
    }
}
