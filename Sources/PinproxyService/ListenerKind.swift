/// Which listener a client connection arrived on: the `listener` field of its log lines and
/// label of its connection counters.
public enum ListenerKind: String, Sendable, CaseIterable {
    /// `proxy.listen`: the client sent CONNECT.
    case connect
    /// `proxy.transparent_listen`: the egress lock redirected the client's own connection.
    case transparent
}
