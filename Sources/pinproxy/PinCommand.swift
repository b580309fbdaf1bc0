import ArgumentParser
import Foundation
import PinproxyInterop
import PinproxyPolicy

/// `pinproxy pin`: the pins of certificates in files, or of the chain a live server presents.
struct PinCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pin",
        abstract: "Print subject, issuer, not-after and both sha256 pins of certificates.",
        discussion: "With --connect HOST[:PORT], fetch the chain a server presents (direct TLS, SNI = HOST) and print a ready-to-paste [hosts.\"HOST\"] block."
    )

    @Option(name: .long, help: ArgumentHelp("Connect to a live server instead of reading files (port 443 by default).", valueName: "HOST[:PORT]"))
    var connect: String?

    @Option(name: .long, help: "Seconds to wait for the connection and handshake.")
    var timeout: Double = 10

    @Argument(help: ArgumentHelp("Certificate files: PEM (bundles too) or DER.", valueName: "FILE"))
    var files: [String] = []

    func validate() throws {
        if connect == nil && files.isEmpty { throw ValidationError("give certificate files, or --connect HOST[:PORT]") }
        if connect != nil && !files.isEmpty { throw ValidationError("give either files or --connect, not both") }
    }

    func run() throws {
        if let connect { return try runConnect(connect) }
        var failed = false
        for file in files {
            guard let data = FileManager.default.contents(atPath: file) else {
                printError("\(file): cannot read the file")
                failed = true
                continue
            }
            do {
                let certificates = try Certificate.parseAll(Array(data))
                for (index, certificate) in certificates.enumerated() {
                    print("\(file) [\(index)]")
                    Self.printCertificate(certificate)
                    print("")
                }
            } catch {
                printError("\(file): no PEM or DER certificate: \(error)")
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
            result = try ChainFetcher.fetch(host: host.description.trimmingCharacters(in: CharacterSet(charactersIn: "[]")),
                                            port: port, serverName: host.serverName, timeout: timeout)
        } catch {
            printError("\(target): \(error)")
            throw ExitCode(1)
        }
        print("# \(host):\(port) presented \(result.chain.count) certificate(s) over \(result.protocolVersion)")
        for (index, certificate) in result.chain.enumerated() {
            print("# [\(index)]")
            Self.printCertificate(certificate, prefix: "#   ")
        }
        print("")
        print(Self.hostBlock(host: host, port: port, chain: result.chain))
    }

    /// A ready-to-paste `[hosts."HOST"]` block pinning the keys of a presented chain (roots left out).
    static func hostBlock(host: TargetHost, port: UInt16, chain: [Certificate]) -> String {
        let pinned = chain.filter { !$0.isSelfIssued }
        var lines = ["[hosts.\"\(host.description.trimmingCharacters(in: CharacterSet(charactersIn: "[]")))\"]", "pin = \"public-key\"", "pins = ["]
        for (index, certificate) in (pinned.isEmpty ? Array(chain.prefix(1)) : pinned).enumerated() {
            let role = index == 0 ? "leaf" : "intermediate"
            lines.append("  \"\(Pin(digest: certificate.publicKeySHA256))\",  # \(role): \(certificate.subject)")
        }
        lines.append("  # add the pin of a backup key here")
        lines.append("]")
        if port != 443 { lines.append("ports = [\(port)]") }
        return lines.joined(separator: "\n")
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
