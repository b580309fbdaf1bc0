import Glibc
import ArgumentParser
import FoundationEssentials
import PinproxyInterop
import PinproxyPolicy
import PinproxyProxy
import PinproxyCore

/// `pinproxy reload`: checks the config, sends SIGHUP to the daemon, then says what the daemon
/// said about that reload (from the result it leaves under `$RUNTIME_DIRECTORY` or beside its
/// `pid_file`): exit 0 when the new config is in force, 1 when the daemon kept its old policy
/// (or could not be reached), 3 when it is in force but changes restart-only settings.
struct ReloadCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reload",
        abstract: "Check the config, make the daemon re-read it (SIGHUP), and print what the daemon said about this reload.",
        discussion: """
            The daemon is the one --pid names (systemd's ExecReload= passes $MAINPID), else the one that wrote the \
            config's pid_file. Returns once the daemon has handled this SIGHUP, printing what it said: the config's \
            warnings, the restart-only settings it changed, or its errors. Exit 0: the new config is in force; 3: in \
            force, but restart-only settings changed, which take effect at the next start (0 with --restart-pending-ok); \
            1: the daemon kept its previous policy, or was not reached. Under systemd, `systemctl reload pinproxy` \
            runs it as ExecReload=.
            """
    )

    @OptionGroup var options: ConfigOption

    @Option(name: .long, help: "Seconds to wait for the daemon to re-read the config.")
    var timeout: Double = 30

    @Option(name: .long, help: ArgumentHelp("The daemon's process id (systemd's $MAINPID) instead of the config's pid_file.", valueName: "PID"))
    var pid: Int32?

    @Flag(name: .long, help: "Exit 0 (not 3) when restart-only settings changed; they are still printed (ExecReload= uses it).")
    var restartPendingOk = false

    /// How often the result is looked at.
    static let interval: TimeInterval = 0.01

    /// The exit status of a reload whose config is in force but changes restart-only settings.
    static let restartPendingStatus: Int32 = 3

    func validate() throws {
        if !(timeout > 0) { throw ValidationError("--timeout must be positive") }
        if let pid, pid <= 0 { throw ValidationError("--pid takes a process id") }
    }

    func run() throws {
        let config = try options.loadOrExit { _ in "the config is rejected: not reloading (the daemon keeps its policy)" }
        let pidFile = config.proxy.pidFile
        let daemon: pid_t
        if let pid {
            daemon = pid
        } else {
            guard let pidFile else {
                printError("pinproxy reload: \(config.path) sets no pid_file in [proxy] and no --pid is given; under systemd run `systemctl reload pinproxy`")
                throw ExitCode(1)
            }
            guard let read = PidFile.read(pidFile) else {
                printError("pinproxy reload: cannot read a process id from \(pidFile): is `pinproxy run --config \(config.path)` running?")
                throw ExitCode(1)
            }
            daemon = read
        }
        guard PidFile.isPinproxy(daemon) else {
            printError("pinproxy reload: " + (pid == nil ? "\(pidFile ?? "-") names pid \(daemon), which is not a running pinproxy (a stale file?)"
                                                          : "pid \(daemon) is not a running pinproxy"))
            throw ExitCode(1)
        }
        guard let resultPath = ReloadResult.path(pidFile: pidFile) else {
            printError("pinproxy reload: \(config.path) sets no pid_file in [proxy], and $\(ReloadResult.runtimeDirectoryVariable) is not set: the daemon leaves no result to read (set pid_file, or reload through systemctl)")
            throw ExitCode(1)
        }
        let sent = Date()
        do {
            try CurrentProcess.sendHangUp(to: daemon)
        } catch {
            printError("pinproxy reload: cannot signal pid \(daemon): \(error.reason)")
            throw ExitCode(1)
        }
        let deadline = Date().addingTimeInterval(timeout)
        var found: ReloadResult?
        while found == nil {
            if let result = ReloadResult.read(resultPath), result.pid == daemon, result.received >= sent {
                found = result
                break
            }
            guard PidFile.isPinproxy(daemon) else {
                printError("pinproxy reload: pinproxy (pid \(daemon)) exited before it re-read the config")
                throw ExitCode(1)
            }
            guard Date() < deadline else {
                printError("pinproxy reload: sent SIGHUP to pinproxy (pid \(daemon)), which has left no result in \(resultPath) after \(timeout.secondsText) s (is it stopping, or an older pinproxy?)")
                throw ExitCode(1)
            }
            usleep(UInt32(Self.interval * 1_000_000))
        }
        try report(found!, path: config.path)
    }

    /// Prints what the daemon said (warnings and errors on stderr) and exits with its status.
    func report(_ result: ReloadResult, path: String) throws {
        let daemon = "pinproxy (pid \(result.pid))"
        switch result.outcome {
        case .failed:
            for error in result.errors { printError(error) }
            printError("pinproxy reload: \(daemon) rejected \(result.config ?? path) (reload \(result.generation)): \(result.errors.count) error(s); the previous policy stays in force")
            throw ExitCode(1)
        case .ignored:
            printError("pinproxy reload: \(daemon) did not re-read the config: \(result.errors.joined(separator: "; "))")
            throw ExitCode(1)
        case .ok:
            for warning in result.warnings { printError(warning) }
            if !result.restartOnly.isEmpty {
                printError("\(result.config ?? path): warning: \(result.restartOnly.joined(separator: ", ")) changed: restart-only settings, they take effect at the next start")
            }
            let warnings = result.warnings.count + (result.restartOnly.isEmpty ? 0 : 1)
            print("\(path): ok" + (warnings == 0 ? "" : ", with \(warnings) warning(s)") + "; \(daemon) has re-read it (reload \(result.generation)): the new policy is in force")
            if !result.restartOnly.isEmpty && !restartPendingOk { throw ExitCode(Self.restartPendingStatus) }
        }
    }
}
