import ArgumentParser
import FoundationEssentials
import PinproxyInterop
import PinproxyPolicy
import PinproxyProxy
import Logging

/// `pinproxy run`: the daemon.
struct RunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run the proxy daemon (SIGHUP reloads the config, SIGTERM drains and stops)."
    )

    @OptionGroup var options: ConfigOption

    func run() throws {
        let source = options.source
        let config: Config
        do {
            config = try source.load()
        } catch {
            // Through the log, so that journald records why the service did not start as an error (<3>).
            let log = AccessLog(format: .logfmt)
            for diagnostic in error.diagnostics {
                log.emit(.error, "config-rejected", [(.error, diagnostic.description)])
            }
            log.emit(.error, "start-failed", [(.detail, "the config is rejected; not starting")])
            throw ExitCode(1)
        }
        if let pidFile = config.proxy.pidFile {
            do {
                try PidFile.checkFree(pidFile)
            } catch {
                AccessLog(format: config.proxy.logFormat).emit(.error, "start-failed", [(.error, "pid_file: \(error)")])
                throw ExitCode(1)
            }
        }
        let daemon: Daemon
        do {
            daemon = try Daemon(configPath: source.path, config: config)
        } catch {
            // Through the log, so that journald records it as an error (<3>).
            AccessLog(format: config.proxy.logFormat).emit(.error, "start-failed", [(.error, "\(error)")])
            throw ExitCode(1)
        }
        // Each reload's result, for `pinproxy reload` (systemd's ExecReload= too), then the pid file
        // replaced: the sign an older `pinproxy reload` waits for.
        let resultPath = ReloadResult.path(pidFile: config.proxy.pidFile)
        daemon.afterReload = { [pidFile = config.proxy.pidFile, logFormat = config.proxy.logFormat] result in
            if let resultPath {
                do {
                    try result.write(to: resultPath)
                } catch {
                    AccessLog(format: logFormat).emit(.warning, "reload", [(.detail, "cannot write the reload result \(resultPath): \(systemMessage(of: error))")])
                }
            }
            if let pidFile { PidFile.replace(pidFile) }
        }
        if let pidFile = config.proxy.pidFile {
            do {
                try PidFile.claim(pidFile)
            } catch {
                AccessLog(format: config.proxy.logFormat).emit(.error, "start-failed", [(.error, "pid_file: \(error)")])
                throw ExitCode(1)
            }
        }
        let status = daemon.run()
        if let pidFile = config.proxy.pidFile { PidFile.release(pidFile) }
        throw ExitCode(status)
    }
}
