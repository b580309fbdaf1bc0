import Glibc
import ArgumentParser
import FoundationEssentials
import PinproxyCore
import PinproxyInterop

/// `pinproxy check --as USER`: the same check, run by a child process as the service would
/// read the files: as USER, and where systemd runs, under the unit's path restrictions too
/// (a transient unit through `systemd-run`), so that "passes as root, fails under systemd" is
/// found before a reload.
struct CheckAsUser {
    let user: String
    /// The config file, absolute (the child may start elsewhere); "-" for the built-in default.
    let config: String

    /// The path restrictions of systemd/pinproxy.service that decide which files it can read.
    static let unitProperties = ["ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "PrivateDevices=yes"]

    /// Whether systemd is the service manager here (`sd_booted()`'s test).
    static var systemdRuns: Bool { FileManager.default.fileExists(atPath: "/run/systemd/system") }

    /// Runs the check as `user`: this process becomes the command, so its output and exit status are this command's.
    func run() throws -> Never {
        let ids: UserDatabase.IDs
        switch UserDatabase.ids(ofUser: user) {
        case .found(let found): ids = found
        case .missing:
            printError("pinproxy check --as \(user): there is no user \"\(user)\" on this host")
            throw ExitCode(2)
        case .failed(let code):
            printError("pinproxy check --as \(user): the user database cannot say: \(String(cString: strerror(code)))")
            throw ExitCode(2)
        }
        let own = getuid()
        guard own == 0 || own == uid_t(ids.uid) else {
            printError("pinproxy check --as \(user): only root can read files as another user")
            throw ExitCode(2)
        }
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        let check = [executable, "check", "--config", config]
        let command: [String]
        if Self.systemdRuns {
            printError("pinproxy check: as user \(user) (uid \(ids.uid)), under the unit's \(Self.unitProperties.joined(separator: ", ")) (systemd-run)")
            command = ["systemd-run", "--quiet", "--pipe", "--wait", "--collect", "--service-type=exec", "-p", "User=\(user)"]
                + Self.unitProperties.flatMap { ["-p", $0] } + ["--"] + check
        } else {
            printError("pinproxy check: as user \(user) (uid \(ids.uid), gid \(ids.gid)); systemd does not run here, so the unit's path restrictions (\(Self.unitProperties.joined(separator: ", "))) are not applied")
            command = ["setpriv", "--reuid=\(ids.uid)", "--regid=\(ids.gid)", "--init-groups", "--"] + check
        }
        do {
            try CurrentProcess.replace(with: command)
        } catch {
            printError("pinproxy check --as \(user): \(error)")
            throw ExitCode(2)
        }
    }
}
