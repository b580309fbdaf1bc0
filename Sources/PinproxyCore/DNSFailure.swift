/// Why a name did not resolve.
public struct DNSFailure: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }

    package init(message: String) {
        self.message = message
    }
}
