import Foundation
import PinproxyInterop
import PinproxyPolicy

/// `pinproxy run`: starts one worker per core, then waits on the control loop for signals.
/// SIGHUP reloads the config (a bad one is logged and the old policy stays); SIGTERM and
/// SIGINT stop accepting and let open tunnels finish within `drain_timeout`.
public final class Daemon {
    private let configPath: String?
    private let shared: SharedState
    private let settings: ProxySettings
    private let control = EventLoop()
    private var workers: [Worker] = []
    private var signals: [SignalWatcher] = []
    private var drainTimer: PinproxyInterop.Timer?
    private let reloadQueue = DispatchQueue(label: "pinproxy.reload")

    /// Prepares the daemon: opens (or creates) the local CA and binds every listener.
    public init(configPath: String?, config: Config) throws {
        self.configPath = configPath
        self.settings = config.proxy
        let log = AccessLog(format: config.proxy.logFormat)
        let caDirectory = config.proxy.caDirectory ?? LocalCA.defaultDirectory()
        let localCA = try LocalCA.openOrCreate(directory: caDirectory)
        shared = try SharedState(policy: PolicyState(config), localCA: localCA, log: log)
        ignoreBrokenPipe()
        let count = config.proxy.workers ?? max(1, ProcessInfo.processInfo.activeProcessorCount)
        for _ in 0..<count {
            let worker = Worker(shared: shared)
            try worker.listen(on: config.proxy.listen)
            workers.append(worker)
        }
        for warning in config.warnings {
            log.emit(.warning, "config-warning", [(.config, config.path), (.warning, warning.description)])
        }
        log.emit(.info, "started", [(.config, config.path), (.entries, String(config.policies.entries.count)),
                                    (.detail, "\(count) worker(s), CA \(localCA.certificatePath)")])
    }

    /// Runs until a stop signal has drained the tunnels; returns the exit status.
    public func run() -> Int32 {
        for (index, worker) in workers.enumerated() {
            worker.start(name: "pinproxy-worker-\(index)")
        }
        for address in workers.first?.boundAddresses ?? [] {
            shared.log.emit(.info, "listening", [(.address, address.description)])
        }
        signals = [
            SignalWatcher(loop: control, signal: SIGHUP) { [unowned self] in self.reload() },
            SignalWatcher(loop: control, signal: SIGTERM) { [unowned self] in self.drain("SIGTERM") },
            SignalWatcher(loop: control, signal: SIGINT) { [unowned self] in self.drain("SIGINT") },
        ]
        control.run()
        shared.log.emit(.info, "stopped", [(.detail, "open tunnels at exit: \(shared.openTunnels.load(ordering: .relaxed))")])
        return 0
    }

    /// Re-reads and checks the config off the loops; a valid one replaces the snapshot for new
    /// connections at once, an invalid one is logged with FILE:LINE and changes nothing.
    private func reload() {
        guard let configPath else {
            shared.log.emit(.info, "reload", [(.outcome, "ok"), (.detail, "running on the built-in default config: nothing to re-read")])
            return
        }
        reloadQueue.async { [shared, settings] in
            do throws(ConfigError) {
                let config = try ConfigLoader.load(path: configPath)
                shared.policy.replace(with: config)
                // Sessions admitted under a policy this reload changed are never resumed.
                let fingerprints = Set(([config.policies.defaultEntry] + config.policies.entries).map(\.policy.fingerprint))
                shared.sessions.retain { key in fingerprints.contains(String(key.prefix { $0 != "|" })) }
                shared.log.emit(.info, "reload", [(.outcome, "ok"), (.config, configPath), (.entries, String(config.policies.entries.count))])
                for warning in config.warnings {
                    shared.log.emit(.warning, "config-warning", [(.config, configPath), (.warning, warning.description)])
                }
                if config.proxy.listen != settings.listen || config.proxy.caDirectory != settings.caDirectory
                    || config.proxy.workers != settings.workers || config.proxy.logFormat != settings.logFormat {
                    shared.log.emit(.warning, "reload", [(.detail, "listen, ca_dir, workers and log_format take effect at the next start")])
                }
            } catch {
                shared.log.emit(.error, "reload", [(.outcome, "failed"), (.config, configPath),
                                                   (.error, error.diagnostics.map(\.description).joined(separator: " | ")),
                                                   (.detail, "the previous policy stays in force")])
            }
        }
    }

    /// Stops accepting, then stops the loops once no connection is open or `drain_timeout` passed.
    private func drain(_ signal: String) {
        guard drainTimer == nil else { return }
        shared.log.emit(.info, "draining", [(.detail, "\(signal): no new connections; \(shared.openConnections.load(ordering: .relaxed)) open, up to \(formatSeconds(settings.drainTimeout))")])
        for worker in workers { worker.stopAccepting() }
        let deadline = Date().addingTimeInterval(settings.drainTimeout)
        drainTimer = PinproxyInterop.Timer(loop: control, after: 0.05, repeats: true) { [unowned self] in
            guard self.shared.openConnections.load(ordering: .relaxed) == 0 || Date() >= deadline else { return }
            for worker in self.workers { worker.stop() }
            self.control.stop()
        }
    }
}
