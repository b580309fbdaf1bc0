import ArgumentParser
import Foundation
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
            `pinproxy egress remove` lifts it.
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

    /// `egress status`: whether the lock is on and what it captures. Exit 0 when on, 3 when off.
    struct Status: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Say whether the lock is on and what it captures (exit 0 when on, 3 when off).")

        @OptionGroup var options: ConfigOption

        func run() throws {
            guard let listing = try Nft.listTable() else {
                print("egress lock: off (no table \(EgressRuleset.table))")
                throw ExitCode(3)
            }
            let expected = try? EgressCommand.ruleset(options)
            if let expected, EgressRuleset.fingerprint(inListing: listing) == expected.fingerprint {
                print("egress lock: on: \(expected.summary)")
                return
            }
            print("egress lock: on, but not as \(options.config ?? "the built-in default config") says (run `pinproxy egress apply` to replace it); the live table:")
            print(listing, terminator: listing.hasSuffix("\n") ? "" : "\n")
        }
    }

    /// The config's ruleset, or its problem printed (exit 1).
    static func ruleset(_ options: ConfigOption) throws -> EgressRuleset {
        let config = try options.loadOrExit()
        do {
            return try EgressRuleset(capture: config.capture, transparentListen: config.proxy.transparentListen, uid: UserDatabase.uid(of:))
        } catch {
            printError("pinproxy egress: \(config.path): \(error)")
            throw ExitCode(1)
        }
    }
}

/// `nft`, run as a child process of the CLI.
enum Nft {
    /// Feeds `text` to `nft -f -` (one transaction); exits 1 with nft's message when it fails.
    static func load(_ text: String, doing what: String) throws {
        let result = try run(["-f", "-"], input: text)
        guard result.status == 0 else {
            printError("pinproxy egress: cannot \(what): nft: \(result.error.trimmingCharacters(in: .whitespacesAndNewlines))")
            throw ExitCode(1)
        }
    }

    /// `nft list table inet pinproxy`; nil when there is no such table.
    static func listTable() throws -> String? {
        let result = try run(["list", "table", EgressRuleset.table], input: "")
        if result.status == 0 { return result.output }
        if result.error.contains("No such file or directory") { return nil }
        printError("pinproxy egress: cannot read the table \(EgressRuleset.table): nft: \(result.error.trimmingCharacters(in: .whitespacesAndNewlines))")
        throw ExitCode(1)
    }

    private static func run(_ arguments: [String], input: String) throws -> (status: Int32, output: String, error: String) {
        guard let executable = findExecutable("nft") else {
            printError("pinproxy egress: nft is not installed (apt-get install nftables)")
            throw ExitCode(1)
        }
        return try runChild(executable, arguments, input: input)
    }
}
