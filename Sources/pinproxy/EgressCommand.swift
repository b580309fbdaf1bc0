import Glibc
import ArgumentParser
import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy

/// `pinproxy egress`: the egress lock, an nftables table (`inet pinproxy`) that sends the host's
/// outgoing HTTPS to pinproxy's transparent listener. `nft` runs as a child of this command,
/// never of the daemon.
struct EgressCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "egress",
        abstract: "The egress lock: redirect this host's outgoing HTTPS to pinproxy's transparent listener (nftables).",
        discussion: """
            Built from [capture] and proxy.transparent_listen of the config: outgoing TCP to capture.ports goes to the \
            127.0.0.1 (IPv4) and [::1] (IPv6) transparent listeners, outgoing UDP to them is rejected (block_quic), the \
            processes of capture.exempt_users go out uncaptured. Everything lives in the table inet pinproxy; no other \
            table is touched. While the lock is on and pinproxy is stopped, HTTPS from this host fails (fail closed): \
            `pinproxy egress remove` lifts it. The transparent port must be privileged (below \
            net.ipv4.ip_unprivileged_port_start): `apply` refuses otherwise. Where IPv6 is off ([::1] cannot be bound), \
            the [::1] listener may be left out: IPv6 to the capture ports is then rejected. With \
            capture.forward_interfaces, TCP forwarded from those interfaces (containers) is redirected in prerouting to \
            the wildcard transparent listeners, and their UDP to the capture ports is rejected.
            """,
        subcommands: [Print.self, Apply.self, Remove.self, Status.self]
    )

    /// `egress print`: the ruleset, for `nft -c -f` or review.
    struct Print: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the ruleset `apply` loads (it passes `nft -c -f`).")

        @OptionGroup var options: ConfigOption

        func run() throws {
            print(try EgressCommand.ruleset(options).text, terminator: "")
        }
    }

    /// `egress apply`: loads the ruleset in one transaction; applying again replaces it.
    struct Apply: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Turn the lock on (or replace it with what the config says now).")

        @OptionGroup var options: ConfigOption

        func run() throws {
            let ruleset = try EgressCommand.ruleset(options)
            let sysctl = "/proc/sys/net/ipv4/ip_unprivileged_port_start"
            guard let text = try? String(contentsOfFile: sysctl, encoding: .utf8),
                  let start = Int(text.trimmingWhitespace()) else {
                printError("pinproxy egress: cannot read \(sysctl): cannot tell whether the transparent port is privileged")
                throw ExitCode(1)
            }
            if let problem = ruleset.privilegeProblem(unprivilegedPortStart: start) {
                printError("pinproxy egress: \(problem)")
                throw ExitCode(1)
            }
            try Nft.load(ruleset.text, doing: "apply the egress lock")
            print("egress lock: on: \(ruleset.summary)")
        }
    }

    /// `egress remove`: deletes the table `inet pinproxy`, and nothing else.
    struct Remove: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Lift the lock: delete the table inet pinproxy (no other table is touched).")

        @OptionGroup var options: ConfigOption

        func run() throws {
            try Nft.load(EgressRuleset.removal, doing: "remove the egress lock")
            print("egress lock: off")
        }
    }

    /// `egress status`: whether the lock is on, holds the rules the config generates, and has
    /// pinproxy listening on each transparent address. Exit 0 when on and healthy, 3 when off,
    /// 4 when on but broken.
    struct Status: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Say whether the lock is on and working (exit 0 when on and healthy, 3 when off, 4 when on but broken; run as root).",
            discussion: """
                Compares the live table with the ruleset the config generates (both listed by the same nft as JSON, the \
                generated one loaded in a throwaway network namespace), and says who listens on each transparent address: \
                pinproxy, nothing (HTTPS from this host fails), or another process (critical: it receives the redirected \
                connections).
                """)

        @OptionGroup var options: ConfigOption

        func run() throws {
            guard let live = try Nft.listTableJSON() else {
                print("egress lock: off (no table \(EgressRuleset.table))")
                throw ExitCode(3)
            }
            let ruleset = try EgressCommand.ruleset(options)
            var healthy = true
            let source = options.config ?? "the built-in default config"
            if EgressRuleset.rules(inJSONListing: live) == EgressRuleset.rules(inJSONListing: try Nft.generatedJSON(ruleset.text)) {
                print("egress lock: on: \(ruleset.summary)")
            } else {
                healthy = false
                print("egress lock: on, but its rules are not what \(source) generates: some traffic may go out uncaptured (run `pinproxy egress apply` to replace them); the live table:")
                let listing = try Nft.listTable() ?? ""
                print(listing, terminator: listing.hasSuffix("\n") ? "" : "\n")
            }
            if ruleset.ipv6Port == nil {
                print("IPv6: off on this host; outgoing IPv6 to the capture ports is rejected")
            }
            for address in ruleset.listenerAddresses {
                let (line, ok) = ListenerReport.describe(address)
                healthy = healthy && ok
                print(line)
            }
            if !healthy { throw ExitCode(4) }
        }
    }

    /// The config's ruleset, or its problem printed (exit 1). The IPv6 listener may be missing
    /// only where `[::1]` cannot be bound.
    static func ruleset(_ options: ConfigOption) throws -> EgressRuleset {
        let config = try options.loadOrExit()
        do {
            return try EgressRuleset(capture: config.capture, transparentListen: config.proxy.transparentListen,
                                     ipv6Available: ExclusiveListener.loopbackIPv6Available, uid: UserDatabase.uid(of:))
        } catch {
            printError("pinproxy egress: \(config.path): \(error)")
            throw ExitCode(1)
        }
    }
}

/// Who listens on a transparent address, read from /proc (as root: another user's descriptors
/// are visible only then).
enum ListenerReport {
    /// A line for `egress status`, and whether it is healthy: pinproxy's socket (this very
    /// program, as a daemon) listens there and nothing else does.
    static func describe(_ address: SocketAddress) -> (line: String, healthy: Bool) {
        let inodes = ListeningSockets.inodes(overlapping: address)
        guard !inodes.isEmpty else {
            return ("listener \(address): nothing listens: lock on, daemon down: HTTPS from this host fails", false)
        }
        let ownExecutable = ProcessExecutables.executable(ofProcess: getpid())
        let processes = ProcessExecutables.processes().filter { $0 != getpid() }
        var pinproxy: [Int32] = []
        var foreign: [String] = []
        for inode in inodes.sorted() {
            let holders = processes.filter { ProcessExecutables.holds($0, Array("socket:[\(inode)]".utf8)) }
            let ours = holders.filter { ProcessExecutables.executable(ofProcess: $0) == ownExecutable }
            pinproxy += ours
            let others = holders.filter { $0 != 1 && !ours.contains($0) }
            if holders.isEmpty {
                foreign.append("socket inode \(inode), held by a process this user cannot see (run as root)")
            } else {
                foreign += others.map { "pid \($0) (\(ProcessExecutables.executable(ofProcess: $0) ?? "?"))" }
            }
        }
        if !foreign.isEmpty {
            return ("listener \(address): CRITICAL: another process listens here and receives redirected connections: \(foreign.joined(separator: ", "))", false)
        }
        if pinproxy.isEmpty {
            return ("listener \(address): held by the service manager (socket activation), pinproxy not running: redirected connections wait until it starts", false)
        }
        return ("listener \(address): pinproxy (pid \(Set(pinproxy).sorted().map(String.init).joined(separator: ", ")))", true)
    }
}

/// `nft`, run as a child process of the CLI.
enum Nft {
    /// Feeds `text` to `nft -f -` (one transaction); exits 1 with nft's message when it fails.
    static func load(_ text: String, doing what: String) throws {
        let result = try run(["-f", "-"], input: text)
        guard result.status == 0 else {
            printError("pinproxy egress: cannot \(what): nft: \(result.error.trimmingWhitespace())")
            throw ExitCode(1)
        }
    }

    /// `nft list table inet pinproxy` (`-j`: as JSON); nil when there is no such table.
    static func listTable(json: Bool = false) throws -> String? {
        let result = try run((json ? ["-j"] : []) + ["list", "table", EgressRuleset.table], input: "")
        if result.status == 0 { return result.output }
        if result.error.contains("No such file or directory") { return nil }
        printError("pinproxy egress: cannot read the table \(EgressRuleset.table): nft: \(result.error.trimmingWhitespace())")
        throw ExitCode(1)
    }

    static func listTableJSON() throws -> String? { try listTable(json: true) }

    /// `text` loaded by the same nft in a throwaway network namespace (`unshare -n`, as root),
    /// and listed there as JSON: what the live table should list.
    static func generatedJSON(_ text: String) throws -> String {
        let nft = try executable()
        guard let unshare = findExecutable("unshare") else {
            printError("pinproxy egress: unshare is not installed (util-linux): cannot compare the live rules")
            throw ExitCode(1)
        }
        let script = #""$0" -f - >/dev/null && exec "$0" -j list table \#(EgressRuleset.table)"#
        let result = try runChild(unshare, ["--net", "--", "/bin/sh", "-c", script, nft], input: text)
        guard result.status == 0 else {
            printError("pinproxy egress: cannot load the generated ruleset in a throwaway network namespace (run as root): \(result.error.trimmingWhitespace())")
            throw ExitCode(1)
        }
        return result.output
    }

    private static func executable() throws -> String {
        guard let executable = findExecutable("nft") else {
            printError("pinproxy egress: nft is not installed (apt-get install nftables)")
            throw ExitCode(1)
        }
        return executable
    }

    private static func run(_ arguments: [String], input: String) throws -> (status: Int32, output: String, error: String) {
        try runChild(try executable(), arguments, input: input)
    }
}
