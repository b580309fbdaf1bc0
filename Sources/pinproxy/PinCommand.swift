import ArgumentParser
import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy

/// `pinproxy pin`: the pins of certificates in files, or of the chain a live server presents.
struct PinCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pin",
        abstract: "Print subject, issuer, not-after and both sha256 pins of certificates; the public-key pin of key files.",
        discussion: "With --connect HOST[:PORT], fetch the chain a server presents (direct TLS, SNI = HOST; --connect-to or --config [resolve] say where to dial) and print a ready-to-paste [hosts.\"HOST\"] block, with a trust line when the chain does not verify against the system store."
    )

    @Option(name: .long, help: ArgumentHelp("Connect to a live server instead of reading files (port 443 by default).", valueName: "HOST[:PORT]"))
    var connect: String?

    @Option(name: .long, help: ArgumentHelp("With --connect: dial this address instead of HOST (SNI stays HOST).", valueName: "ADDRESS[:PORT]"))
    var connectTo: String?

    @Option(name: .long, help: ArgumentHelp("With --connect: dial the address this config's [resolve] gives HOST. " + ConfigSource.help, valueName: "FILE"))
    var config: String?

    @Option(name: .long, help: ArgumentHelp("With --connect: when the chain needs a trust anchor, write it (PEM) to this new file.", valueName: "FILE"))
    var saveAnchor: String?

    @Option(name: .long, help: "With --connect: seconds for the connection and handshake together.")
    var timeout: Double = 10

    @Argument(help: ArgumentHelp("Certificate files (PEM, bundles too, or DER), or public or private key files (only the public key's pin is printed).", valueName: "FILE"))
    var files: [String] = []

    func validate() throws {
        if connect == nil && files.isEmpty { throw ValidationError("give certificate files, or --connect HOST[:PORT]") }
        if connect != nil && !files.isEmpty { throw ValidationError("give either files or --connect, not both") }
        if connect == nil && (connectTo != nil || config != nil || saveAnchor != nil) {
            throw ValidationError("--connect-to, --config and --save-anchor go with --connect")
        }
        if !(timeout > 0) { throw ValidationError("--timeout must be positive") }
    }

    func run() throws {
        if let connect { return try runConnect(connect) }
        var failed = false
        for file in files {
            // The name as given, even when its bytes are not UTF-8.
            let path = FilePathBytes.commandLineArgument(file)
            let bytes: [UInt8]
            do {
                bytes = try path.read(.certificates)
            } catch {
                printError("\(path): the file \(error)")
                failed = true
                continue
            }
            do {
                let certificates = try Certificate.parseAll(bytes)
                for (index, certificate) in certificates.enumerated() {
                    print("\(path) [\(index)]")
                    Self.printCertificate(certificate)
                    print("")
                }
            } catch {
                if Self.printKeyPin(file: "\(path)", bytes: bytes) { continue }
                printError("\(path) \(error)" + (Self.keyProblem(bytes).map { "; as a key: \($0)" } ?? ""))
                failed = true
            }
        }
        if failed { throw ExitCode(1) }
    }

    func runConnect(_ target: String) throws {
        guard let (host, port) = Self.splitHostPort(target) else {
            throw ValidationError("--connect takes HOST or HOST:PORT (IPv6 in brackets), not \"\(target)\"")
        }
        let result: ChainFetcher.Result
        do {
            result = try fetchChain(host: host, port: port)
        } catch let exit as ExitCode {
            throw exit
        } catch {
            printError("\(target): \(error)")
            throw ExitCode(1)
        }
        try CapturedChain.refuse(result.chain, target: target, config: try loadedConfig())
        if let incomplete = result.incompleteHandshake {
            printError("\(target): the handshake did not complete (\(incomplete)); printing the \(result.chain.count) certificate(s) that arrived before it stopped")
            print("# the handshake did not complete: \(incomplete)")
            print("# the server sent these certificates, but did not prove it holds the leaf's key")
        }
        print("# \(host):\(port) presented \(result.chain.count) certificate(s) over \(result.protocolVersion)")
        for (index, certificate) in result.chain.enumerated() {
            print("# [\(index)]")
            Self.printCertificate(certificate, prefix: "#   ")
        }
        print("")
        print(Self.hostBlock(host: host, path: result.chain, before: try trustLines(for: result.chain, host: host),
                             after: port != 443 ? ["ports = [\(port)]"] : []))
        if result.incompleteHandshake != nil { throw ExitCode(1) }
    }

    /// A ready-to-paste `[hosts."HOST"]` block pinning the keys of `path` (leaf first, as
    /// `pinned(_:)` picks them), with the lines `before` the pins (`trust`) and `after` them (`ports`).
    static func hostBlock(host: TargetHost, path: [Certificate], before: [String], after: [String]) -> String {
        let pinned = pinned(path)
        var lines = ["[hosts.\"\(host.description.trimmingBrackets())\"]"] + before + ["pin = \"public-key\"", "pins = ["]
        for (index, certificate) in pinned.enumerated() {
            let role = index == 0 ? "leaf" : certificate.isSelfIssued ? "root (the leaf's issuer)" : "intermediate"
            lines.append("  \"\(Pin(digest: certificate.publicKeySHA256))\",  # \(role): \(certificate.subject)")
        }
        lines.append(contentsOf: backupSlot(caKeys: pinned.count - 1))
        lines.append("]")
        return (lines + after).joined(separator: "\n")
    }

    /// The keys a block pins, so that it survives a renewal: the leaf's, its issuing CA's (even
    /// where that CA is the anchor), and every intermediate above; a self-issued root above the
    /// issuer is left out. A self-signed leaf alone gives one key, and the block a backup slot.
    static func pinned(_ path: [Certificate]) -> [Certificate] {
        guard let leaf = path.first else { return [] }
        let above = path.dropFirst().enumerated().filter { index, certificate in index == 0 || !certificate.isSelfIssued }
        return [leaf] + above.map(\.element).filter { $0.publicKeySHA256 != leaf.publicKeySHA256 }
    }

    /// The comment closing a pin list: where a backup key goes, and, when the list holds no CA
    /// key (only what the leaf's next key would replace), that the block breaks without one.
    static func backupSlot(caKeys: Int) -> [String] {
        if caKeys > 0 { return ["  # add the pin of a backup key here"] }
        return ["  # BACKUP PIN NEEDED: these are only leaf keys; the next certificate renewal (a new key) breaks this block",
                "  # unless the pin of a backup key is added here (pinproxy pin BACKUP-KEY-FILE)"]
    }

    static func printCertificate(_ certificate: Certificate, prefix: String = "  ") {
        print("\(prefix)subject: \(certificate.subject)")
        print("\(prefix)issuer: \(certificate.issuer)")
        print("\(prefix)not after: \(rfc3339(certificate.notAfter))")
        print("\(prefix)public-key: \(Pin(digest: certificate.publicKeySHA256))")
        print("\(prefix)certificate: \(Pin(digest: certificate.certificateSHA256))")
    }

    /// Splits `HOST`, `HOST:PORT`, `[V6]:PORT` or a bare IPv6 literal.
    static func splitHostPort(_ text: String) -> (TargetHost, UInt16)? {
        if let host = TargetHost(text) { return (host, 443) }
        guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]), port > 0 else { return nil }
        let hostText = String(text[..<colon])
        if hostText.contains(":") && !hostText.hasPrefix("[") { return nil }
        guard let host = TargetHost(hostText) else { return nil }
        return (host, port)
    }
}
