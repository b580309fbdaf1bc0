import ArgumentParser
import FoundationEssentials
import PinproxyCore
import PinproxyInterop

/// `name` in PATH (or the usual sbin directories, which a user's PATH may lack).
func findExecutable(_ name: String) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
    let directories = path.split(separator: ":").map(String.init) + ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
    return directories.map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
}

/// Runs `executable` with `arguments` and `input` on its stdin: its exit status, stdout and stderr.
func runChild(_ executable: String, _ arguments: [String], input: String) throws -> (status: Int32, output: String, error: String) {
    do {
        let result = try CommandRun.run(executable, arguments, input: Array(input.utf8))
        return (result.status, result.output, result.error)
    } catch {
        printError("pinproxy: cannot run \(executable): \(error)")
        throw ExitCode(1)
    }
}
