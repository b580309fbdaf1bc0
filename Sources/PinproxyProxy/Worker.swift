import Dispatch
import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import PinproxyService
import Synchronization
import Logging

/// State every worker shares: the policy snapshot, the local CA, the TLS contexts, the log
/// and the connection counters. Everything here is safe to use from any loop.
final class SharedState: Sendable {
    let policy: PolicyState
    let localCA: LocalCA
    let upstreamTLS: TLSClientContext
    let interceptTLS: TLSServerContext
    let log: AccessLog
    let metrics: ProxyMetrics
    /// Writes connection records (`ConnectionRecord`): lines, metrics, reports.
    let recorder: ConnectionRecorder
    /// Upstream sessions for resumption, keyed by `ClientConnection.sessionKey`.
    let sessions = TLSSessionCache()
    /// What the full handshake of each cached session delivered beside the chain for `ct`
    /// (the SCT extension and the staple), keyed like `sessions`: a resumed session delivers
    /// neither again, and its CT judgement needs them.
    let deliveredSCTs = BoundedCache<DeliveredBesideChain>()
    let openConnections = Atomic<Int>(0)
    let openTunnels = Atomic<Int>(0)
    /// Set at SIGTERM: /healthz then reports 503.
    let draining = Atomic<Bool>(false)
    /// Where pin-failure reports go (`report_to`); nil when nowhere.
    let reports: PinFailureReporter?
    /// The runner of entries' `verify_command`s.
    let customChecks: CustomChecks
    /// What identifying clients looks up off the loops, and its caches (`[clients]`).
    let identityLookups = IdentityLookups()
    /// The daemon's upstream sockets, while a transparent listener is on (capture loops).
    let ownUpstreams: OwnUpstreams?
    /// The transparent listeners' addresses, as bound at start (`transparent_listen` is restart-only).
    let transparentListeners: [SocketAddress]
    /// The tunnels each client holds, while a rule reads them (`Admission.countsClientTunnels`).
    let clientTunnels = ClientTunnels()
    /// Open connections the process's file-descriptor limit allows (two descriptors each),
    /// once the daemon's own descriptors and the admin connections are set aside.
    let descriptorCeiling: Int

    /// Descriptors kept for the daemon itself: loops, listeners, DNS, log, CA files.
    static let reservedDescriptors = 64

    init(policy: PolicyState, localCA: LocalCA, log: AccessLog, metrics: ProxyMetrics, openFileLimit: Int, adminConnections: Int) throws {
        descriptorCeiling = max(1, (openFileLimit - Self.reservedDescriptors - adminConnections) / 2)
        self.policy = policy
        self.localCA = localCA
        self.log = log
        self.metrics = metrics
        upstreamTLS = try TLSClientContext()
        interceptTLS = try TLSServerContext()
        let settings = policy.config.proxy
        customChecks = CustomChecks(concurrency: settings.verifyCommandConcurrency)
        transparentListeners = settings.transparentListen.map { SocketAddress(address: $0.address, port: $0.port) }
        ownUpstreams = transparentListeners.isEmpty ? nil : OwnUpstreams()
        reports = settings.reportTo.isEmpty ? nil : PinFailureReporter(
            destinations: settings.reportTo, registry: metrics.registry,
            limits: { [policy] in
                // What the config in force now says: a reload changes them.
                let settings = policy.config.proxy
                return .init(perMinute: settings.reportRateLimit, fileMaxBytes: settings.reportFileMaxBytes)
            },
            checkCollector: { [policy] chain, host, port in
                // The collector is verified like any other host, under the policy in force now.
                let config = policy.config
                return TrustEvaluator.evaluate(.init(chain: chain), host: host, port: port,
                                               entry: config.policies.lookup(host), context: config.verdictContext, at: Date())
            },
            resolve: { [policy] host in policy.config.resolve[host]?.first?.description ?? host },
            log: { [log] warning, detail in log.emit(warning ? .warning : .error, "report-failed", [(.detail, detail)]) })
        recorder = ConnectionRecorder(log: log, metrics: metrics) { [reports] verdict, host, port, client in
            Self.report(verdict, host: host, port: port, client: client, to: reports)
        }
    }

    /// Sends a pin-failure report for `verdict`, when a certificate reason refused (or would
    /// have refused) the connection to `host`:`port`; `client` is the identity it carries
    /// (`report_client_identity`), if any.
    private static func report(_ verdict: Verdict, host: TargetHost, port: UInt16, client: ClientIdentity?, to reports: PinFailureReporter?) {
        guard let reports, let reason = verdict.reason, reason.traits.isCertificateReason else { return }
        reports.submit(host: host, port: port) { PinFailureReport.json(verdict: verdict, host: host, port: port, at: Date(), client: client) }
    }

    /// The local CA's leaf for `host` (minted now if it has none fit for use, and counted).
    func leaf(for host: TargetHost) throws -> LocalCA.MintedLeaf {
        try localCA.leaf(for: host) { metrics.leafMinted() }
    }

    func tunnelOpened() {
        openTunnels.add(1, ordering: .relaxed)
        metrics.tunnelOpened()
    }

}

/// Accept: one event loop on its own thread, with its own listeners (SO_REUSEPORT, so the
/// kernel spreads accepts across workers), DNS resolver and connections.
final class Worker: @unchecked Sendable {
    let loop: EventLoop
    /// The loop's DNS resolver: resolv.conf and /etc/hosts are read when the worker is made,
    /// not on the loop at the first lookup.
    let resolver: DNSResolver
    let shared: SharedState
    /// Who this worker's clients are (`[clients]`).
    let identifier: ClientIdentifier
    private var listeners: [(listener: Listener, kind: ListenerKind)] = []
    private var connections: [ObjectIdentifier: ClientConnection<LoopIO>] = [:]
    /// What the connections do their I/O with: this worker's loop.
    private var io: LoopIO { LoopIO(loop: loop, resolver: resolver, identifier: identifier, shared: shared) }
    private var heartbeatTimer: PinproxyInterop.Timer?
    private var lastLimitWarning: TimeInterval = -.infinity
    private let finished = DispatchSemaphore(value: 0)
    /// When this loop last ran its heartbeat timer (monotonic milliseconds): a worker that stops
    /// beating is stuck, and the watchdog and /healthz say so.
    let heartbeat = Atomic<Int>(0)

    /// How often a worker proves it is alive.
    static let heartbeatInterval: TimeInterval = 1

    /// Throws when libevent cannot make the loop or its resolver.
    init(shared: SharedState) throws {
        self.shared = shared
        loop = try EventLoop()
        resolver = try DNSResolver(loop: loop)
        identifier = ClientIdentifier(lookups: shared.identityLookups)
        beat()
        heartbeatTimer = PinproxyInterop.Timer(loop: loop, after: Self.heartbeatInterval, repeats: true) { [unowned self] in self.beat() }
    }

    private func beat() {
        heartbeat.store(Int(ProcessLimits.monotonicSeconds() * 1000), ordering: .relaxed)
    }

    /// Whether the loop has beaten within `seconds`.
    func isAlive(within seconds: TimeInterval) -> Bool {
        Double(Int(ProcessLimits.monotonicSeconds() * 1000) - heartbeat.load(ordering: .relaxed)) / 1000 <= seconds
    }

    /// Binds every address for clients of `kind` (before `start`).
    func listen(on addresses: [ListenAddress], kind: ListenerKind) throws {
        for address in addresses {
            add(try Listener(loop: loop, address: SocketAddress(address: address.address, port: address.port)) { [unowned self] socket, client in
                self.accept(socket: socket, client: client, kind: kind)
            }, kind: kind)
        }
    }

    /// Accepts, for clients of `kind`, on sockets listening already: those the service manager
    /// handed over, and the transparent listeners every worker shares (before `start`).
    func listen(onInherited sockets: [Int32], kind: ListenerKind) throws {
        for socket in sockets {
            add(try Listener(loop: loop, listeningSocket: socket) { [unowned self] socket, client in
                self.accept(socket: socket, client: client, kind: kind)
            }, kind: kind)
        }
    }

    private func add(_ listener: Listener, kind: ListenerKind) {
        listener.onError = { [shared, weak listener] reason in
            shared.log.emit(.error, "accept-failed", [(.address, listener?.localAddress?.description ?? "-"),
                                                      (.detail, "\(reason): accepting pauses for \(formatSeconds(Listener.pauseAfterError))")])
        }
        listeners.append((listener, kind))
    }

    /// Where the listeners are bound, and for which clients.
    var boundAddresses: [(SocketAddress, ListenerKind)] { listeners.compactMap { entry in entry.listener.localAddress.map { ($0, entry.kind) } } }

    /// The inodes of this worker's listening sockets.
    var listenerInodes: [UInt64] { listeners.compactMap(\.listener.socketInode) }

    /// Runs the loop on a new thread.
    func start(name: String) {
        NamedThread.start(name: name) { [loop, finished] in
            loop.run()
            OpenSSLLifetime.endThread()
            finished.signal()
        }
    }

    /// Waits until the loop's thread has returned (after `stop`), at most `timeout` seconds.
    func join(timeout: TimeInterval) {
        _ = finished.wait(timeout: .now() + timeout)
    }

    private func accept(socket: Int32, client: SocketAddress?, kind: ListenerKind) {
        let snapshot = shared.policy.snapshot
        let config = snapshot.config
        let limit = min(config.proxy.maxConnections ?? shared.descriptorCeiling, shared.descriptorCeiling)
        let open = shared.openConnections.add(1, ordering: .relaxed).newValue
        guard open <= limit else {
            shared.openConnections.subtract(1, ordering: .relaxed)
            closeSocket(socket)
            // At most one line a second: a flood of connections must not become a flood of logs.
            if loop.now - lastLimitWarning >= 1 {
                lastLimitWarning = loop.now
                shared.log.emit(.warning, "connection-limit", [(.client, client?.description ?? "-"),
                                                               (.detail, "\(limit) connections open (max_connections, or the open-file limit): new ones are closed at accept")])
            }
            return
        }
        // Read before the buffer event takes the socket over.
        let addresses = kind == .transparent ? ConnectionAddresses(socket: socket) : nil
        let ourEnd = !Admission.needsClientIdentity(config) || kind == .transparent ? nil : SocketAddress.local(of: socket)
        setNoDelay(socket)
        let connection: ClientConnection<LoopIO>
        do {
            let clientSide = try BufferEvent(loop: loop, socket: socket)
            connection = ClientConnection(io: io, clientSide: clientSide, client: client, ourEnd: ourEnd, config: snapshot,
                                          listener: kind) { [unowned self] in self.remove($0) }
        } catch {
            shared.openConnections.subtract(1, ordering: .relaxed)
            shared.log.emit(.error, "accept-failed", [(.client, client?.description ?? "-"), (.detail, "\(error): the connection is closed")])
            return
        }
        connections[ObjectIdentifier(connection)] = connection
        if let addresses { connection.startTransparent(addresses) } else { connection.start() }
    }

    /// Called by a connection once it has closed.
    func remove(_ connection: ClientConnection<LoopIO>) {
        if connections.removeValue(forKey: ObjectIdentifier(connection)) != nil {
            shared.openConnections.subtract(1, ordering: .relaxed)
        }
    }

    /// Stops accepting; open connections go on.
    func stopAccepting() {
        loop.post { [self] in
            for entry in listeners { entry.listener.close() }
            listeners.removeAll()
        }
    }

    /// Closes whatever is still open (a tunnel logs `reason` as why it ended), then ends the
    /// loop once the closes have been carried out.
    func stop(cutting reason: String) {
        loop.post { [self] in
            for connection in Array(connections.values) { connection.cut(reason) }
            loop.stop()
        }
    }
}

/// The SCTs of the TLS extension and the staple one full upstream handshake delivered.
struct DeliveredBesideChain: Sendable {
    let tlsExtensionSCTs: [[UInt8]]
    let ocspStaple: [UInt8]?
}
