/// What happened on a connection's socket, as its event callback reports it (a buffer event's:
/// reading or writing, then end of stream, error, timeout, or connected). The values are
/// libevent's `BEV_EVENT_*`, so that a logged value reads the same; `BufferEvent` maps each
/// flag by name.
public struct EndpointEvents: OptionSet, Sendable {
    public let rawValue: Int16
    public init(rawValue: Int16) { self.rawValue = rawValue }
    public static let reading = EndpointEvents(rawValue: 0x01)
    public static let writing = EndpointEvents(rawValue: 0x02)
    public static let eof = EndpointEvents(rawValue: 0x10)
    public static let error = EndpointEvents(rawValue: 0x20)
    public static let timeout = EndpointEvents(rawValue: 0x40)
    public static let connected = EndpointEvents(rawValue: 0x80)
}
