import ArgumentParser
import FoundationEssentials
import PinproxyPolicy

/// Which config a command reads: the file `--config` names; `--config -`, the built-in default;
/// without `--config`, the installed config when it exists, else the built-in default.
enum ConfigSource: Equatable {
    case file(String)
    case embedded

    /// The installed config, read when no `--config` is given.
    static let installedPath = "/etc/pinproxy/pinproxy.toml"
    /// Names another installed config, for tests and packagers.
    static let installedPathVariable = "PINPROXY_DEFAULT_CONFIG"

    /// The help text of every `--config` option.
    static let help = "The TOML config file; \"-\" for the built-in default (config/pinproxy.toml). Without it, \(installedPath) when that exists, else the built-in default."

    /// The source for `--config OPTION` (nil: not given), in `environment`.
    static func resolve(_ option: String?) -> ConfigSource {
        if let option { return option == "-" ? .embedded : .file(option) }
        return FileManager.default.fileExists(atPath: installed) ? .file(installed) : .embedded
    }

    /// The installed config's path: `installedPath`, unless `PINPROXY_DEFAULT_CONFIG` names another.
    static var installed: String {
        ProcessInfo.processInfo.environment[installedPathVariable].flatMap { $0.isEmpty ? nil : $0 } ?? installedPath
    }

    /// The file read; nil for the built-in default.
    var path: String? {
        if case .file(let path) = self { return path }
        return nil
    }

    /// The name diagnostics give it.
    var name: String { path ?? ConfigLoader.embeddedPath }

    /// Loads and checks the config, judging warnings at `now`.
    func load(now: Date = Date()) throws(ConfigError) -> Config {
        switch self {
        case .file(let path): return try ConfigLoader.load(path: path, now: now)
        case .embedded: return try ConfigLoader.loadEmbedded(now: now)
        }
    }

    /// Says on stderr which config applies when `--config` was not given (`option` is nil).
    func announce(option: String?) {
        guard option == nil else { return }
        if let path {
            printError("pinproxy: no --config given: reading \(path)")
        } else {
            printError("pinproxy: no --config given and no \(Self.installed): using the built-in default config")
        }
    }
}

/// `--config FILE`, shared by the commands that read a config.
struct ConfigOption: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp(ConfigSource.help, valueName: "FILE"))
    var config: String?

    /// The config this command reads.
    var source: ConfigSource { ConfigSource.resolve(config) }

    /// Loads and checks the config, or the embedded default.
    func load() throws(ConfigError) -> Config {
        try source.load()
    }

    /// Says which config applies, then loads it, or prints every problem as `FILE:LINE: message`
    /// (then `closing`, if given) and exits with `status`.
    func loadOrExit(status: Int32 = 1, closing: ((ConfigError) -> String)? = nil) throws -> Config {
        let source = self.source
        source.announce(option: config)
        do {
            return try source.load()
        } catch {
            for diagnostic in error.diagnostics { printError(diagnostic.description) }
            if let closing { printError(closing(error)) }
            throw ExitCode(status)
        }
    }
}
