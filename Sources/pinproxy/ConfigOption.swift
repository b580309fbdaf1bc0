import ArgumentParser
import PinproxyPolicy

/// `--config FILE`, shared by the commands that read a config.
struct ConfigOption: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("The TOML config file; without it, the built-in default (config/pinproxy.toml).", valueName: "FILE"))
    var config: String?

    /// Loads and checks the config, or the embedded default.
    func load() throws(ConfigError) -> Config {
        if let config { return try ConfigLoader.load(path: config) }
        return try ConfigLoader.loadEmbedded()
    }

    /// Loads the config, or prints every problem as `FILE:LINE: message` (then `closing`, if
    /// given) and exits with `status`.
    func loadOrExit(status: Int32 = 1, closing: ((ConfigError) -> String)? = nil) throws -> Config {
        do {
            return try load()
        } catch {
            for diagnostic in error.diagnostics { printError(diagnostic.description) }
            if let closing { printError(closing(error)) }
            throw ExitCode(status)
        }
    }
}
