import Foundation
import PinproxyInterop
import PinproxyPolicy
import PinproxyService
import Synchronization

/// State every worker shares: the policy snapshot, the local CA, the TLS contexts, the log
/// and the connection counters. Everything here is safe to use from any loop.
final class SharedState: Sendable {
    let policy: PolicyState
    let localCA: LocalCA
    let upstreamTLS: TLSClientContext
    let interceptTLS: TLSServerContext
    let log: AccessLog
    let metrics: ProxyMetrics
    /// Upstream sessions for resumption, keyed by `ClientConnection.sessionKey`.
    let sessions = TLSSessionCache()
    let openConnections = Atomic<Int>(0)
    let openTunnels = Atomic<Int>(0)
    /// Set at SIGTERM: /healthz then reports 503.
    let draining = Atomic<Bool>(false)

    init(policy: PolicyState, localCA: LocalCA, log: AccessLog, metrics: ProxyMetrics) throws {
        self.policy = policy
        self.localCA = localCA
        self.log = log
        self.metrics = metrics
        upstreamTLS = try TLSClientContext()
        interceptTLS = try TLSServerContext()
    }

    func tunnelOpened() {
        openTunnels.add(1, ordering: .relaxed)
        metrics.tunnelOpened()
    }

    func tunnelClosed() {
        openTunnels.subtract(1, ordering: .relaxed)
        metrics.tunnelClosed(bytesUp: 0, bytesDown: 0)
    }
}

/// Step 1: one event loop on its own thread, with its own listeners (SO_REUSEPORT, so the
/// kernel spreads accepts across workers), DNS resolver and connections.
final class Worker: @unchecked Sendable {
    let loop = EventLoop()
    let shared: SharedState
    private var listeners: [Listener] = []
    private var connections: [ObjectIdentifier: ClientConnection] = [:]

    init(shared: SharedState) {
        self.shared = shared
    }

    /// Binds every address (before `start`).
    func listen(on addresses: [ListenAddress]) throws {
        for address in addresses {
            listeners.append(try Listener(loop: loop, address: SocketAddress(address: address.address, port: address.port)) { [unowned self] socket, client in
                self.accept(socket: socket, client: client)
            })
        }
    }

    /// Accepts on sockets handed over by the service manager (before `start`).
    func listen(onInherited sockets: [Int32]) throws {
        for socket in sockets {
            listeners.append(try Listener(loop: loop, listeningSocket: socket) { [unowned self] socket, client in
                self.accept(socket: socket, client: client)
            })
        }
    }

    /// Where the listeners are bound.
    var boundAddresses: [SocketAddress] { listeners.compactMap(\.localAddress) }

    /// Runs the loop on a new thread.
    func start(name: String) {
        let thread = Thread { [loop] in loop.run() }
        thread.name = name
        thread.start()
    }

    private func accept(socket: Int32, client: SocketAddress?) {
        let config = shared.policy.config
        let open = shared.openConnections.add(1, ordering: .relaxed).newValue
        guard open <= config.proxy.maxConnections else {
            shared.openConnections.subtract(1, ordering: .relaxed)
            closeSocket(socket)
            shared.log.emit(.warning, "connection-limit", [(.client, client?.description ?? "-"),
                                                           (.detail, "max_connections = \(config.proxy.maxConnections) reached: closed at accept")])
            return
        }
        let connection = ClientConnection(worker: self, socket: socket, client: client, config: config)
        connections[ObjectIdentifier(connection)] = connection
        connection.start()
    }

    /// Called by a connection once it has closed.
    func remove(_ connection: ClientConnection) {
        if connections.removeValue(forKey: ObjectIdentifier(connection)) != nil {
            shared.openConnections.subtract(1, ordering: .relaxed)
        }
    }

    /// Stops accepting; open connections go on.
    func stopAccepting() {
        loop.post { [self] in
            for listener in listeners { listener.close() }
            listeners.removeAll()
        }
    }

    /// Ends the loop; whatever is still open is abandoned.
    func stop() {
        loop.stop()
    }
}
