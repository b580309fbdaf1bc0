import ArgumentParser
import FoundationEssentials
import PinproxyInterop
import PinproxyPolicy

/// `pinproxy suggest`: learns a pin policy from the daemon's decision lines.
struct SuggestCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "suggest",
        abstract: "Print a [hosts.\"HOST\"] block per host, pinning every public key the daemon verified, from its decision log.",
        discussion: """
            Reads decision lines (logfmt or JSON) from FILEs or standard input, e.g.
            journalctl -u pinproxy -o cat | pinproxy suggest. Only paths the daemon verified are
            learned, from the lines' verified_pins (leaf and intermediates): allowed connections,
            and report-only ones refused for a pin or revocation status alone. Certificates a
            server presented off that path, and lines without verified_pins, are never learned.
            Run with [default] enforce = false for a while, then review and paste.
            """
    )

    @Option(name: .long, help: "Skip hosts seen on fewer verified connections.")
    var minConnections = 1

    @Option(name: .long, help: ArgumentHelp("Only hosts this pattern matches (an exact name, *.NAME or an IP literal).", valueName: "PATTERN"))
    var host: String?

    @Option(name: .long, help: ArgumentHelp("The config whose entries the blocks replace: each block keeps its entry's trust, ports and other keys. " + ConfigSource.help, valueName: "FILE"))
    var config: String?

    @Argument(help: ArgumentHelp("Log files; standard input when none is given.", valueName: "FILE"))
    var files: [String] = []

    func validate() throws {
        if minConnections < 1 { throw ValidationError("--min-connections must be at least 1") }
        if let host, HostPattern(host) == nil { throw ValidationError("--host takes a host pattern (NAME, *.NAME or an IP literal), not \"\(host)\"") }
    }

    func run() throws {
        var source = ConfigSource.resolve(config)
        source.announce(option: config)
        var loaded: Config?
        do { loaded = try source.load() } catch {
            for diagnostic in error.diagnostics { printError(diagnostic.description) }
            // A config named with --config must load; the installed one only lends its entries' keys.
            if config != nil { throw ExitCode(2) }
            printError("pinproxy suggest: \(source.name) does not load here: the blocks keep no entry's keys (give --config)")
            source = .embedded
        }
        var suggestion = PolicySuggestion()
        var lines = 0
        func read(_ input: ChunkReader) throws(ChunkReader.ReadFailure) {
            var pending = Data()
            func consume(_ line: Data) {
                lines += 1
                guard let text = String(data: line, encoding: .utf8),
                      let decision = DecisionLogReader.decision(of: Substring(text)) else { return }
                suggestion.learn(decision)
            }
            while true {
                let chunk = try input.read(upTo: 1 << 16)
                if chunk.isEmpty { break }
                pending.append(contentsOf: chunk)
                while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    consume(pending[pending.startIndex..<newline])
                    pending.removeSubrange(pending.startIndex...newline)
                }
                // A line is at most a few KiB; anything longer is not a decision line.
                if pending.count > Self.maximumLineBytes { pending.removeAll() }
            }
            if !pending.isEmpty { consume(pending) }
        }
        for name in files.isEmpty ? ["standard input"] : files {
            do throws(ChunkReader.ReadFailure) {
                try read(files.isEmpty ? .standardInput : ChunkReader(path: name))
            } catch {
                printError("\(name): cannot read: \(error)")
                throw ExitCode(2)
            }
        }
        let hosts = suggestion.selected(minConnections: minConnections, pattern: host.flatMap(HostPattern.init))
        print("# pinproxy suggest: \(lines) line(s) read, \(suggestion.hosts.count) host(s) with verified chains, \(hosts.count) printed")
        for (why, count) in suggestion.skipped.sorted(by: { $0.key < $1.key }) {
            print("# not learned from: \(count) connection line(s), \(PolicySuggestion.comment(why))")
        }
        for host in hosts {
            print("")
            // On the built-in default there is no entry to keep: only the ports seen.
            let entry = source == .embedded ? nil : TargetHost(host.name).flatMap { loaded?.policies.lookup($0) }
            print(PolicySuggestion.render(host, entry: entry, allowPorts: loaded?.proxy.allowPorts ?? [443]))
        }
        if hosts.isEmpty { throw ExitCode(1) }
    }

    static let maximumLineBytes = 1 << 20
}
