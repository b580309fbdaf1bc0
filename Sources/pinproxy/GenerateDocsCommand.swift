import ArgumentParser
import FoundationEssentials
import PinproxyInterop
import PinproxyPolicy

/// `pinproxy generate-docs` (hidden): writes the files made from the key and reason
/// declarations (`GeneratedDocs`), or the `pinproxy.toml(5)` man page.
struct GenerateDocsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "generate-docs",
        abstract: "Write config/pinproxy.toml and the generated tables of docs/ from the declarations (for developers).",
        shouldDisplay: false
    )

    @Option(name: .long, help: "The repository to write in.")
    var root = "."

    @Flag(name: .long, help: "Write nothing; exit 1 when a file differs from what it would be.")
    var check = false

    @Option(name: .long, help: ArgumentHelp("Print the pinproxy.toml(5) man page, dated DATE (YYYY-MM-DD), instead.", valueName: "DATE"))
    var manPage: String?

    func run() throws {
        if let date = manPage {
            print(GeneratedDocs.manPage(version: "pinproxy \(BuildInfo.version)", date: date), terminator: "")
            return
        }
        var stale: [String] = []
        for file in GeneratedDocs.files {
            let url = URL(fileURLWithPath: root).appendingPathComponent(file.path)
            let committed = (try? String(contentsOf: url, encoding: .utf8)) ?? ""
            guard let text = file.render(committed) else {
                printError("\(file.path): a generated table's heading is missing")
                throw ExitCode(1)
            }
            guard text != committed else { continue }
            stale.append(file.path)
            if !check { try text.write(to: url, atomically: true, encoding: .utf8) }
        }
        for path in stale { print(check ? "\(path): differs from the declarations" : "wrote \(path)") }
        if check && !stale.isEmpty { throw ExitCode(1) }
    }
}
