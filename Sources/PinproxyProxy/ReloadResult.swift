import FoundationEssentials
import PinproxyCore

/// What the daemon found on one SIGHUP: whether the new config replaced the old one, its
/// warnings, the restart-only settings it changed (in force at the next start only), or its
/// errors. `pinproxy run` writes it,
/// as JSON replaced atomically, where `pinproxy reload` (by hand, or as systemd's
/// `ExecReload=`) waits for the result of the reload its signal caused.
public struct ReloadResult: Codable, Sendable, Equatable {
    public enum Outcome: String, Codable, Sendable {
        /// The new config is in force (it may have warnings).
        case ok
        /// The config was rejected: the previous policy stays in force.
        case failed
        /// The daemon is stopping: the config was not re-read.
        case ignored
    }

    public var pid: Int32
    /// The daemon's count of SIGHUPs handled, this one included.
    public var generation: Int
    /// When the daemon took the signal: a reload received before `pinproxy reload` sent its
    /// signal cannot have read the config that command checked.
    public var received: Date
    public var outcome: Outcome
    public var config: String?
    /// The config's warnings, as `check` prints them.
    public var warnings: [String] = []
    /// Restart-only settings the new config changes: they take effect at the next start.
    public var restartOnly: [String] = []
    public var errors: [String] = []

    public init(pid: Int32, generation: Int, received: Date, outcome: Outcome, config: String?) {
        self.pid = pid
        self.generation = generation
        self.received = received
        self.outcome = outcome
        self.config = config
    }

    /// The systemd unit's `RuntimeDirectory=` (`$RUNTIME_DIRECTORY`), where the result is left.
    public static let runtimeDirectoryVariable = "RUNTIME_DIRECTORY"

    /// Where the daemon leaves its results: `$RUNTIME_DIRECTORY/reload-result.json` under
    /// systemd, else beside the `pid_file` (`PIDFILE.reload.json`); nil with neither.
    public static func path(pidFile: String?, environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        if let directory = environment[runtimeDirectoryVariable]?.split(separator: ":").first, !directory.isEmpty {
            return String(directory) + "/reload-result.json"
        }
        return pidFile.map { $0 + ".reload.json" }
    }

    /// Writes the result to `path` (a new file renamed over the old one).
    public func write(to path: String) throws {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .secondsSince1970
        encoder.outputFormatting = [.sortedKeys]
        try encoder.encode(self).write(to: URL(fileURLWithPath: path), options: .atomic)
    }

    /// The result in `path`, nil when there is none (or it is not one).
    public static func read(_ path: String) -> ReloadResult? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        return try? decoder.decode(ReloadResult.self, from: data)
    }
}
