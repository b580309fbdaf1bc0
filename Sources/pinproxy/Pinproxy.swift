import Glibc
import ArgumentParser
import FoundationEssentials
import PinproxyInterop

/// The `pinproxy` command: the daemon and the tools an operator uses to write and test a policy.
@main
struct Pinproxy: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pinproxy",
        abstract: "A local proxy that enforces TLS certificate and public-key pinning for any HTTP client.",
        version: BuildInfo.versionLine,
        subcommands: [RunCommand.self, CheckCommand.self, PinCommand.self, KeygenCommand.self, EvaluateCommand.self, CACommand.self,
                      ReloadCommand.self, DiagnoseCommand.self, SuggestCommand.self, WaitCommand.self, EgressCommand.self, ReasonsCommand.self,
                      GenerateDocsCommand.self]
    )

    /// Runs the command; usage errors exit 2, as every pinproxy command documents.
    static func main() {
        OpenSSLLifetime.initialize()
        do {
            var command = try parseAsRoot()
            do {
                try command.run()
            } catch let error as ValidationError {
                // Found by the command itself: shown with its own usage, not the top level's.
                let subcommand = type(of: command)
                printError("Error: \(error.message)\nUsage: " + usageString(for: subcommand)
                           + "\n  See 'pinproxy \(subcommand.configuration.commandName ?? "") --help' for more information.")
                Glibc.exit(2)
            }
        } catch let exit as ExitCode {
            Glibc.exit(exit.rawValue)
        } catch {
            let code = exitCode(for: error)
            if code == .success {
                exit(withError: error)
            }
            StandardError.writeLine(fullMessage(for: error))
            Glibc.exit(code == .validationFailure ? 2 : code.rawValue)
        }
    }
}

/// Writes a line to standard error.
func printError(_ text: String) {
    StandardError.writeLine(text)
}
