/// A socket that cannot be bound or used for listening.
public struct ListenerError: Error, CustomStringConvertible {
    public let message: String
    public init(message: String) { self.message = message }
    public var description: String { message }
}
