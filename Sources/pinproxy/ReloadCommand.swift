import ArgumentParser
import Foundation
import PinproxyInterop
import PinproxyPolicy

/// `pinproxy reload`: checks the config, then sends SIGHUP to the daemon its `pid_file` names.
struct ReloadCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reload",
        abstract: "Check the config, then make the daemon that wrote its pid_file re-read it (SIGHUP).",
        discussion: "Returns once the daemon has re-read the config (it replaces its pid_file then), so that the next connection meets the new policy. Under systemd, use `systemctl reload pinproxy` instead. The daemon logs event=reload with the outcome."
    )

    @OptionGroup var options: ConfigOption

    @Option(name: .long, help: "Seconds to wait for the daemon to re-read the config.")
    var timeout: Double = 30

    /// How often the pid file is looked at.
    static let interval: TimeInterval = 0.01

    func validate() throws {
        if !(timeout > 0) { throw ValidationError("--timeout must be positive") }
    }

    func run() throws {
        let config = try options.loadOrExit { _ in "the config is rejected: not reloading (the daemon keeps its policy)" }
        guard let pidFile = config.proxy.pidFile else {
            printError("pinproxy reload: \(config.path) sets no pid_file in [proxy]; under systemd run `systemctl reload pinproxy`")
            throw ExitCode(1)
        }
        guard let pid = PidFile.read(pidFile) else {
            printError("pinproxy reload: cannot read a process id from \(pidFile): is `pinproxy run --config \(config.path)` running?")
            throw ExitCode(1)
        }
        guard PidFile.isPinproxy(pid) else {
            printError("pinproxy reload: \(pidFile) names pid \(pid), which is not a running pinproxy (a stale file?)")
            throw ExitCode(1)
        }
        let before = PidFile.identity(pidFile)
        do {
            try CurrentProcess.sendHangUp(to: pid)
        } catch {
            printError("pinproxy reload: cannot signal pid \(pid): \(error.reason)")
            throw ExitCode(1)
        }
        let deadline = Date().addingTimeInterval(timeout)
        while PidFile.identity(pidFile) == before {
            guard PidFile.isPinproxy(pid) else {
                printError("pinproxy reload: pinproxy (pid \(pid)) exited before it re-read the config")
                throw ExitCode(1)
            }
            guard Date() < deadline else {
                printError("pinproxy reload: sent SIGHUP to pinproxy (pid \(pid)), which has not re-read the config after \(String(format: "%g", timeout)) s (is it stopping?)")
                throw ExitCode(1)
            }
            Thread.sleep(forTimeInterval: Self.interval)
        }
        if PidFile.identity(pidFile) == nil {
            printError("pinproxy reload: pinproxy (pid \(pid)) removed its pid file: it is stopping, and did not re-read the config")
            throw ExitCode(1)
        }
        print("\(config.path): ok; pinproxy (pid \(pid)) has re-read it: its log says event=reload with the outcome")
    }
}
