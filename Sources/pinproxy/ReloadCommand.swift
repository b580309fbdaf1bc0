import ArgumentParser
import Foundation
import Glibc
import PinproxyPolicy

/// `pinproxy reload`: checks the config, then sends SIGHUP to the daemon its `pid_file` names.
struct ReloadCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reload",
        abstract: "Check the config, then make the daemon that wrote its pid_file re-read it (SIGHUP).",
        discussion: "Under systemd, use `systemctl reload pinproxy` instead. The daemon logs event=reload with the outcome."
    )

    @OptionGroup var options: ConfigOption

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
        guard kill(pid, SIGHUP) == 0 else {
            printError("pinproxy reload: cannot signal pid \(pid): \(String(cString: strerror(errno)))")
            throw ExitCode(1)
        }
        print("\(config.path): ok; sent SIGHUP to pinproxy (pid \(pid)): its log says event=reload with the outcome")
    }
}
