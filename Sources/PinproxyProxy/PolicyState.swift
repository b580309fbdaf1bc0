import PinproxyCore
import PinproxyPolicy
import PinproxyInterop

/// The config every event loop reads: one immutable snapshot, swapped whole on reload.
/// A connection takes the snapshot once, at accept, and keeps it to the end.
public final class PolicyState: Sendable {
    private let current: Locked<ConfigSnapshot>

    public init(_ config: Config) {
        current = Locked(ConfigSnapshot(config))
    }

    /// The snapshot new connections use.
    var snapshot: ConfigSnapshot {
        current.withLock { $0 }
    }

    /// The config new connections use.
    public var config: Config {
        snapshot.config
    }

    /// Makes `config` the snapshot for every new connection.
    public func replace(with config: Config) {
        current.withLock { $0 = ConfigSnapshot(config) }
    }
}

/// One config generation, held by reference: every connection accepted under it keeps it as
/// one pointer. `Config` is a struct of every declared key, so a copy in each connection grew
/// every open tunnel with each key added (1,056 bytes a connection object at 351b4d7).
final class ConfigSnapshot: Sendable {
    let config: Config

    init(_ config: Config) {
        self.config = config
    }
}
