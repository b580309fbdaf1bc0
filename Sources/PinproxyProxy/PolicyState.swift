import PinproxyCore
import PinproxyPolicy
import PinproxyInterop

/// The config every event loop reads: one immutable snapshot, swapped whole on reload.
/// A connection takes the snapshot once, at accept, and keeps it to the end.
public final class PolicyState: Sendable {
    private let current: Locked<Config>

    public init(_ config: Config) {
        current = Locked(config)
    }

    /// The snapshot new connections use.
    public var config: Config {
        current.withLock { $0 }
    }

    /// Makes `config` the snapshot for every new connection.
    public func replace(with config: Config) {
        current.withLock { $0 = config }
    }
}
