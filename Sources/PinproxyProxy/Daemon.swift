import Dispatch
import Glibc
import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import PinproxyService
import Logging
import Synchronization

/// `pinproxy run`: starts one worker per core, then waits on the control loop for signals.
/// SIGHUP reloads the config (a bad one is logged and the old policy stays); SIGTERM and
/// SIGINT stop accepting and let open tunnels finish within `drain_timeout`. Under systemd it
/// speaks the notify protocol (READY, RELOADING, STOPPING, WATCHDOG, STATUS) and accepts on
/// the sockets passed in LISTEN_FDS; `metrics_listen` serves /metrics and /healthz.
public final class Daemon {
    private let configPath: String?
    private let shared: SharedState
    /// The [proxy] settings it started with: what a restart-only key holds until the next start.
    private let settings: ProxySettings
    private let control: EventLoop
    private var workers: [Worker] = []
    private var signals: [SignalWatcher] = []
    private var drainTimer: PinproxyInterop.Timer?
    private let reloadQueue = DispatchQueue(label: "pinproxy.reload")
    private let notifier = SystemdNotifier()
    /// Called (off the loops) once each SIGHUP has been handled, whatever its outcome, with
    /// what this reload found: `pinproxy run` leaves it for `pinproxy reload` (`ReloadResult`)
    /// and replaces its pid file then.
    public var afterReload: (@Sendable (ReloadResult) -> Void)?
    /// How many SIGHUPs have been handled.
    private var generation = 0
    private var adminServer: AdminHTTPServer?
    private var housekeeping: [PinproxyInterop.Timer] = []
    /// The transparent listeners in use and their sockets' inodes, for the minutely check.
    private var transparentAddresses: [SocketAddress] = []
    private var transparentInodes: Set<UInt64> = []
    /// How often `checkTransparentListeners` runs.
    static let transparentCheckInterval: TimeInterval = 60

    /// Prepares the daemon: opens (or creates) the local CA and binds every listener.
    public init(configPath: String?, config: Config) throws {
        self.configPath = configPath
        self.settings = config.proxy
        let environment = ClientIdentityEnvironment.problems(in: config)
        let environmentErrors = environment.filter { $0.severity == .error }
        if !environmentErrors.isEmpty { throw ConfigError(diagnostics: environmentErrors) }
        let log = AccessLog(format: config.proxy.logFormat)
        let caDirectory = config.proxy.caDirectory ?? LocalCA.defaultDirectory()
        let localCA = try LocalCA.openOrCreate(directory: caDirectory)
        let metrics = ProxyMetrics(version: BuildInfo.version, commit: BuildInfo.commit ?? "unknown")
        let openFileLimit = ProcessLimits.raiseOpenFileLimit()
        let adminConnections = config.proxy.metricsListen == nil ? 0 : AdminHTTPServer.defaultMaxConnections
        shared = try SharedState(policy: PolicyState(config), localCA: localCA, log: log, metrics: metrics,
                                 openFileLimit: openFileLimit, adminConnections: adminConnections)
        if let maxConnections = config.proxy.maxConnections, maxConnections > shared.descriptorCeiling {
            log.emit(.warning, "connection-limit", [(.detail, "the open-file limit (\(openFileLimit)) allows \(shared.descriptorCeiling) connections, fewer than max_connections = \(maxConnections): raise LimitNOFILE / ulimit -n")])
        }
        ignoreBrokenPipe()
        EventLibraryLog.route { [log] severity, message in
            switch severity {
            case .debug: break
            case .info: log.emit(.info, "libevent", [(.detail, message)])
            case .warning: log.emit(.warning, "libevent", [(.detail, message)])
            case .error: log.emit(.error, "libevent", [(.detail, message)])
            }
        }
        control = try EventLoop()
        // Signal handlers first: a signal that arrives once the port accepts must never find the
        // default action (death). Until the control loop runs, signals wait in libevent's queue.
        signals = [
            SignalWatcher(loop: control, signal: SIGHUP) { [unowned self] in self.reload() },
            SignalWatcher(loop: control, signal: SIGTERM) { [unowned self] in self.drain("SIGTERM") },
            SignalWatcher(loop: control, signal: SIGINT) { [unowned self] in self.drain("SIGINT") },
        ]
        let inherited = try InheritedSockets.take()
        let passedTransparent = inherited.filter { $0.name == TransparentListeners.inheritedName }
        let connectSockets = inherited.filter { $0.name != TransparentListeners.inheritedName }.map(\.fd)
        defer { connectSockets.forEach(closeSocket) }
        let count = config.proxy.workers ?? max(1, ProcessInfo.processInfo.activeProcessorCount)
        // Checked before binding, so that no client is queued on a socket about to be closed,
        // and again after, against a daemon that bound at the same moment.
        var bound = (connectSockets.isEmpty ? config.proxy.listen : []) + config.proxy.transparentListen
        let passedInodes = Set(inherited.compactMap { try? Descriptor.status(of: $0.fd).inode })
        try Self.refuseSharedListeners(bound, ours: passedInodes)
        let transparent = try TransparentListeners.open(
            config.proxy.transparentListen.map { SocketAddress(address: $0.address, port: $0.port) },
            inherited: passedTransparent.map { ($0.fd, SocketAddress.local(of: $0.fd)) },
            ipv6Available: ExclusiveListener.loopbackIPv6Available,
            bind: { address throws(SystemError) in try ExclusiveListener.bind(address) })
        // Every worker accepts on its own duplicate; these originals are closed once they exist.
        defer { transparent.sockets.forEach { closeSocket($0.fd) } }
        for (fd, address) in transparent.unlisted {
            closeSocket(fd)
            log.emit(.warning, "socket-activation", [(.detail, "the service manager passed a socket named \(TransparentListeners.inheritedName) on \(address?.description ?? "an unknown address") that proxy.transparent_listen does not list: not used (make pinproxy-transparent.socket and the config agree)")])
        }
        for (address, error) in transparent.unavailable {
            bound.removeAll { SocketAddress(address: $0.address, port: $0.port) == address }
            log.emit(.warning, "transparent-ipv6-unavailable", [(.address, address.description),
                                                                (.detail, "IPv6 is off on this host (\(error)): the IPv4 transparent listener alone is used; `pinproxy egress apply` then rejects outgoing IPv6 to the capture ports")])
        }
        // The transparent port stays pinproxy's by privilege: no verify_command child may bind it.
        try Self.dropBindCapability(passing: inherited.filter { $0.name != TransparentListeners.inheritedName }, transparent, log: log)
        for _ in 0..<count {
            let worker = try Worker(shared: shared)
            if connectSockets.isEmpty { try worker.listen(on: config.proxy.listen, kind: .connect) } else { try worker.listen(onInherited: connectSockets, kind: .connect) }
            try worker.listen(onInherited: transparent.sockets.map(\.fd), kind: .transparent)
            workers.append(worker)
        }
        transparentInodes = transparent.inodes
        transparentAddresses = transparent.sockets.map(\.address)
        try Self.refuseSharedListeners(bound, ours: Set(workers.flatMap(\.listenerInodes)).union(passedInodes))
        if !inherited.isEmpty {
            log.emit(.info, "socket-activation", [(.detail, "accepting on \(inherited.count) socket(s) from the service manager (\(passedTransparent.count) transparent)\(connectSockets.isEmpty ? "" : "; proxy.listen is not used")")])
        }
        metrics.policyInForce(config.policies)
        metrics.ctLogListInForce(published: config.verdictContext.ctLogs?.list.published)
        if let metricsListen = config.proxy.metricsListen {
            let routes = metrics.adminRoutes(healthy: { [shared, workers] in
                !shared.draining.load(ordering: .relaxed) && workers.allSatisfy { $0.isAlive(within: Self.stuckAfter) }
            })
            adminServer = try AdminHTTPServer(loop: control, listen: metricsListen, routes: routes,
                                              requestTimeout: config.proxy.adminTimeout, maxConnections: adminConnections) { [log] reason in
                log.emit(.error, "accept-failed", [(.address, metricsListen.description),
                                                   (.detail, "\(reason): accepting pauses for \(formatSeconds(Listener.pauseAfterError))")])
            }
        }
        for warning in localCA.warnings {
            log.emit(.warning, "local-ca", [(.detail, warning)])
        }
        for warning in config.warnings + environment {
            log.emit(.warning, "config-warning", [(.config, config.path), (.warning, warning.description)])
        }
        log.emit(.info, "started", [(.config, config.path), (.entries, String(config.policies.entries.count)),
                                    (.detail, "\(count) worker(s), CA \(localCA.certificatePath)")])
    }

    /// Without systemd pinproxy binds the privileged transparent port itself, with
    /// `CAP_NET_BIND_SERVICE` in its ambient set (`setpriv --ambient-caps`), which every child
    /// would inherit. Capabilities belong to threads, and libdispatch's have started by now: so
    /// once the sockets are bound, pinproxy drops it and runs itself again, passing them as socket
    /// activation does (the service manager's under their names, the transparent ones named
    /// `transparent`). Throws if a
    /// thread still holds it (then a `verify_command` child could bind the transparent port).
    private static func dropBindCapability(passing connect: [InheritedSocket], _ transparent: TransparentListeners, log: AccessLog) throws {
        if let sets = Capabilities.current, sets.ambient & (UInt64(1) << UInt64(CapabilitySets.netBindService)) != 0 {
            let sockets = connect.map { ($0.fd, $0.name) } + transparent.sockets.map { ($0.fd, TransparentListeners.inheritedName) }
            log.emit(.info, "socket-activation", [(.detail, "the transparent listeners are bound: running again without CAP_NET_BIND_SERVICE, with \(sockets.count) socket(s)")])
            do throws(SystemError) {
                try Capabilities.execAgain(dropping: CapabilitySets.netBindService, passing: sockets)
            } catch {
                throw ListenerError(message: "cannot run again without CAP_NET_BIND_SERVICE: \(error)")
            }
        }
        let holding = Capabilities.threadsPassingOn(CapabilitySets.netBindService)
        guard holding.isEmpty else {
            throw ListenerError(message: "threads \(holding.map(String.init).joined(separator: ", ")) hold CAP_NET_BIND_SERVICE in their ambient set: a verify_command child could bind the transparent port")
        }
    }

    /// Every minute, off the loops: is a socket other than pinproxy's listening on a transparent
    /// address (a wildcard one, say, bound by a process with CAP_NET_BIND_SERVICE)? Logged at
    /// level error and counted; redirected connections go to the most specific listener, which
    /// stays pinproxy's, but the lock no longer holds if pinproxy stops.
    private func checkTransparentListeners() {
        guard !transparentAddresses.isEmpty else { return }
        DispatchQueue.global(qos: .utility).async { [shared, transparentAddresses, transparentInodes] in
            for address in transparentAddresses {
                let foreign = ListeningSockets.inodes(overlapping: address).subtracting(transparentInodes)
                guard !foreign.isEmpty else { continue }
                shared.metrics.foreignTransparentListener()
                shared.log.emit(.error, "transparent-listener-foreign", [(.address, address.description),
                                                                         (.detail, "\(foreign.count) socket(s) that are not pinproxy's listen on this transparent address (socket inodes \(foreign.sorted().map(String.init).joined(separator: ", "))): `ss -ltnpe` names their process")])
            }
        }
    }

    /// The workers bind `listen` with SO_REUSEPORT, which lets another process of the same user
    /// (a second pinproxy, say) listen on the same address; the kernel would then split clients
    /// between two policies. (The transparent listeners never set it.) Such a listener, or any
    /// other on a transparent address, stops the start.
    private static func refuseSharedListeners(_ addresses: [ListenAddress], ours: Set<UInt64>) throws {
        for address in addresses {
            let socketAddress = SocketAddress(address: address.address, port: address.port)
            if !ListeningSockets.inodes(overlapping: socketAddress).isSubset(of: ours) {
                throw ListenerError(message: "another process already listens on \(socketAddress): with both listening, clients would be split between them. Stop it (another pinproxy?) or choose another proxy.listen (or proxy.transparent_listen)")
            }
        }
    }

    /// Runs until a stop signal has drained the tunnels; returns the exit status.
    public func run() -> Int32 {
        for (index, worker) in workers.enumerated() {
            worker.start(name: "pinproxy-worker-\(index)")
        }
        for (address, kind) in workers.first?.boundAddresses ?? [] {
            shared.log.emit(.info, "listening", [(.address, address.description), (.listener, kind.rawValue)])
        }
        if let adminServer {
            shared.log.emit(.info, "metrics-listening", [(.address, adminServer.boundAddress.description)])
        }
        startHousekeeping()
        notifier.ready(status: statusLine())
        control.run()
        for worker in workers { worker.join(timeout: 5) }
        waitForReload(timeout: 5)
        shared.reports?.stop()
        shared.log.emit(.info, "stopped", [(.detail, "open tunnels at exit: \(shared.openTunnels.load(ordering: .relaxed))")])
        return 0
    }

    /// Lets a reload that is still reading files finish before the process exits, so that exit
    /// never cuts it half-way (its threads would still hold what they allocated).
    private func waitForReload(timeout: TimeInterval) {
        let finished = DispatchSemaphore(value: 0)
        reloadQueue.async { finished.signal() }
        if finished.wait(timeout: .now() + timeout) == .timedOut {
            shared.log.emit(.warning, "reload", [(.detail, "still loading at exit after \(formatSeconds(timeout)); exiting anyway")])
        }
    }

    /// A worker whose heartbeat is older than this is stuck.
    static let stuckAfter: TimeInterval = 5 * Worker.heartbeatInterval

    /// The one-line STATUS= for systemd.
    private func statusLine() -> String { Self.status(shared) }

    private static func status(_ shared: SharedState) -> String {
        "\(shared.policy.config.policies.entries.count) host entries, \(shared.openTunnels.load(ordering: .relaxed)) open tunnels, \(shared.openConnections.load(ordering: .relaxed)) connections"
    }

    /// Watchdog pings, STATUS= updates, and the hourly countdown of pin-expiry days.
    private func startHousekeeping() {
        if let interval = notifier.watchdogInterval {
            // Pinged only while every worker loop beats: a stuck worker lets systemd restart us.
            let seconds = Double(interval.components.seconds) + Double(interval.components.attoseconds) / 1e18
            housekeeping.append(PinproxyInterop.Timer(loop: control, after: seconds, repeats: true) { [notifier, workers] in
                if workers.allSatisfy({ $0.isAlive(within: Self.stuckAfter) }) { notifier.watchdog() }
            })
        }
        if notifier.isEnabled {
            housekeeping.append(PinproxyInterop.Timer(loop: control, after: 5, repeats: true) { [unowned self] in
                self.notifier.status(self.statusLine())
            })
        }
        housekeeping.append(PinproxyInterop.Timer(loop: control, after: Self.transparentCheckInterval, repeats: true) { [unowned self] in
            self.checkTransparentListeners()
        })
        housekeeping.append(PinproxyInterop.Timer(loop: control, after: 3_600, repeats: true) { [shared] in
            shared.metrics.policyInForce(shared.policy.config.policies)
        })
    }

    /// Re-reads and checks the config off the loops; a valid one replaces the snapshot for new
    /// connections at once, an invalid one is logged with FILE:LINE and changes nothing.
    private func reload() {
        generation += 1
        let received = ReloadResult(pid: ProcessInfo.processInfo.processIdentifier, generation: generation, received: Date(),
                                    outcome: .ok, config: configPath)
        var result = received
        guard !shared.draining.load(ordering: .relaxed) else {
            shared.log.emit(.info, "reload", [(.outcome, "ignored"), (.detail, "stopping: the config is not re-read")])
            result.outcome = .ignored
            result.errors = ["stopping: the config is not re-read"]
            reloadQueue.async { [afterReload, result] in afterReload?(result) }
            return
        }
        guard let configPath else {
            shared.log.emit(.info, "reload", [(.outcome, "ok"), (.detail, "running on the built-in default config: nothing to re-read")])
            result.warnings = ["warning: running on the built-in default config: nothing to re-read"]
            reloadQueue.async { [afterReload, result] in afterReload?(result) }
            return
        }
        // Report files are reopened whatever the config says: logrotate has moved them.
        shared.reports?.reopenFiles()
        notifier.reloading()
        reloadQueue.async { [shared, settings, notifier, afterReload, received] in
            var result = received
            defer {
                // A stop that began meanwhile has said STOPPING=1; READY=1 would undo it.
                if !shared.draining.load(ordering: .relaxed) { notifier.ready(status: "reloaded; " + Self.status(shared)) }
                afterReload?(result)
            }
            // Whatever the reload finds: a command's own files may change without the config.
            // Answers stored meanwhile belong to the old entries, which new connections never use.
            shared.customChecks.forgetAnswers()
            do throws(ConfigError) {
                let config = try ConfigLoader.load(path: configPath)
                let environment = ClientIdentityEnvironment.problems(in: config)
                let environmentErrors = environment.filter { $0.severity == .error }
                if !environmentErrors.isEmpty { throw ConfigError(diagnostics: environmentErrors) }
                shared.policy.replace(with: config)
                shared.metrics.reload(ok: true)
                shared.metrics.policyInForce(config.policies)
                shared.metrics.ctLogListInForce(published: config.verdictContext.ctLogs?.list.published)
                // Sessions admitted under a policy this reload changed are never resumed.
                let fingerprints = Set(([config.policies.defaultEntry] + config.policies.entries).map(\.fingerprint))
                shared.sessions.retain { key in fingerprints.contains(String(key.prefix { $0 != "|" })) }
                shared.deliveredSCTs.retain { key in fingerprints.contains(String(key.prefix { $0 != "|" })) }
                shared.log.emit(.info, "reload", [(.outcome, "ok"), (.config, configPath), (.entries, String(config.policies.entries.count))])
                for warning in config.warnings + environment {
                    shared.log.emit(.warning, "config-warning", [(.config, configPath), (.warning, warning.description)])
                    result.warnings.append(warning.description)
                }
                let restartOnly = settings.restartOnlyChanges(to: config.proxy)
                if !restartOnly.isEmpty {
                    let detail = "\(restartOnly.joined(separator: ", ")) changed: restart-only settings, they take effect at the next start"
                    shared.log.emit(.warning, "reload", [(.detail, detail)])
                    result.restartOnly = restartOnly
                }
            } catch {
                shared.metrics.reload(ok: false)
                shared.log.emit(.error, "reload", [(.outcome, "failed"), (.config, configPath),
                                                   (.error, error.diagnostics.map(\.description).joined(separator: " | ")),
                                                   (.detail, "the previous policy stays in force")])
                result.outcome = .failed
                result.errors = error.diagnostics.map(\.description)
            }
        }
    }

    /// Stops accepting, then stops the loops once no connection is open or `drain_timeout` passed.
    private func drain(_ signal: String) {
        guard drainTimer == nil else { return }
        shared.draining.store(true, ordering: .relaxed)
        notifier.stopping(status: "draining \(shared.openConnections.load(ordering: .relaxed)) connections")
        shared.log.emit(.info, "draining", [(.detail, "\(signal): no new connections; \(shared.openConnections.load(ordering: .relaxed)) open, up to \(formatSeconds(settings.drainTimeout))")])
        for worker in workers { worker.stopAccepting() }
        let deadline = Date().addingTimeInterval(settings.drainTimeout)
        drainTimer = PinproxyInterop.Timer(loop: control, after: 0.05, repeats: true) { [unowned self] in
            guard self.shared.openConnections.load(ordering: .relaxed) == 0 || Date() >= deadline else { return }
            for worker in self.workers { worker.stop(cutting: "drain_timeout ran out") }
            self.control.stop()
        }
    }
}
