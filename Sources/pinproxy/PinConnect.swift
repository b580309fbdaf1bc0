import ArgumentParser
import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy

extension PinCommand {
    /// Fetches the chain HOST presents: dialling `--connect-to`, else the addresses that
    /// the config's `[resolve]` gives HOST, else HOST through the system resolver; SNI = HOST
    /// in every case. The first address that completes a handshake wins; all of them share one
    /// `--timeout`.
    func fetchChain(host: TargetHost, port: UInt16) throws -> ChainFetcher.Result {
        var lastError: Error?
        let targets = try dialTargets(host: host, port: port)
        let deadline = Deadline(after: timeout)
        for (address, dialPort) in targets {
            do {
                return try ChainFetcher.fetch(host: address, port: dialPort, serverName: host.serverName, deadline: deadline)
            } catch {
                lastError = error
            }
        }
        throw lastError ?? ValidationError("no address to connect to for \(host)")
    }

    /// The addresses `fetchChain` dials, in order.
    func dialTargets(host: TargetHost, port: UInt16) throws -> [(String, UInt16)] {
        if let connectTo {
            guard let target = Self.splitAddress(connectTo, defaultPort: port) else {
                throw ValidationError("--connect-to takes ADDRESS or ADDRESS:PORT (IPv6 in brackets), not \"\(connectTo)\"")
            }
            return [target]
        }
        if let loaded = try loadedConfig(announce: true), let name = host.serverName, let addresses = loaded.resolve[name] {
            return addresses.map { ($0.description, port) }
        }
        switch host {
        case .name(let name): return [(name, port)]
        case .ip(let address): return [(address.description, port)]
        }
    }

    /// The config `--config` names, else the deployed one (`ConfigSource`), loaded; nil for the
    /// built-in default. Its problems are printed, and the exit status is 2.
    func loadedConfig(announce: Bool = false) throws -> Config? {
        let source = ConfigSource.resolve(config)
        guard source != .embedded else { return nil }
        if announce { source.announce(option: config) }
        do {
            return try source.load()
        } catch {
            for diagnostic in error.diagnostics { printError(diagnostic.description) }
            throw ExitCode(2)
        }
    }

    /// `ADDRESS`, `ADDRESS:PORT`, `[V6]:PORT` or a bare IPv6 literal; the port defaults to
    /// DEFAULTPORT. The address is returned without brackets, ready for getaddrinfo.
    static func splitAddress(_ text: String, defaultPort: UInt16) -> (String, UInt16)? {
        if let address = IPAddress(text) { return (address.description, defaultPort) }
        if TargetHost(text) != nil { return (text, defaultPort) }
        guard let (host, port) = splitHostPort(text) else { return nil }
        switch host {
        case .name(let name): return (name, port)
        case .ip(let address): return (address.description, port)
        }
    }

    /// The `trust` lines of the printed block: none when the presented chain verifies against
    /// the system store; otherwise a `trust` list naming the top certificate the server
    /// presented (its root, or the intermediate closest to it), which `--save-anchor` writes.
    func trustLines(for chain: [Certificate], host: TargetHost) throws -> [String] {
        let configDirectory = config.flatMap { $0 == "-" ? nil : URL(fileURLWithPath: $0).deletingLastPathComponent().path }
        return try Self.trustLines(for: chain, host: host, saveAnchor: saveAnchor, configDirectory: configDirectory)
    }

    /// `trustLines(for:host:)`, with the file `--save-anchor` names (if any), printed relative
    /// to `configDirectory` (the directory of the `--config` file) or else absolute, so that the
    /// `trust` line resolves to that file once pasted. A leaf is proposed as its own anchor only
    /// when it is self-signed: a server that sends no CA certificate gets no anchor line.
    static func trustLines(for chain: [Certificate], host: TargetHost, saveAnchor: String?, configDirectory: String? = nil) throws -> [String] {
        guard let leaf = chain.first else { return [] }
        let intermediates = Array(chain.dropFirst())
        let now = Date()
        let system = try TrustStore.system().verify(leaf: leaf, intermediates: intermediates, at: now)
        if system.isVerified { return [] }
        let untrusted = system.problems.filter { $0.kind == .untrusted }
        if untrusted.isEmpty {
            return system.problems.map { "# note: the chain does not verify: \($0)" }
        }
        let anchor = chain.last!
        if anchor === leaf && !leaf.isIssued(by: leaf) {
            return ["# the chain does not verify against the system trust store: \(untrusted[0].message)",
                    "# no anchor proposed: the server sent its leaf alone, and a leaf that is not self-signed is no anchor",
                    "#   (anyone can present one). Its issuer was not sent: \(leaf.issuer)",
                    "#   Have the server send its intermediate, or list an anchor that issued it (obtained out of band)"]
        }
        let role = anchor === leaf ? "the leaf itself (self-signed: the server presented no CA certificate)"
            : anchor.isSelfIssued ? "the root the server presented" : "the top intermediate the server presented"
        var file = "\(host.serverName ?? "server")-anchor.pem"
        var lines = ["# the chain does not verify against the system trust store: \(untrusted[0].message)",
                     "# anchor: \(role): \(anchor.subject)",
                     "#   certificate: \(Pin(digest: anchor.certificateSHA256))  not after: \(rfc3339(anchor.notAfter))"]
        if let saveAnchor {
            do {
                try Data(anchor.pem.utf8).write(to: URL(fileURLWithPath: saveAnchor), options: .withoutOverwriting)
            } catch {
                printError("--save-anchor \(saveAnchor): cannot write the file: \(systemMessage(of: error))")
                throw ExitCode(1)
            }
            file = ConfigPaths.printed(saveAnchor, configDirectory: configDirectory)
            lines.append("#   written to \(saveAnchor); check it out of band before you trust it")
        } else {
            lines.append("#   save it with `pinproxy pin --connect HOST[:PORT] --save-anchor \(file)` (and check it out of band before you trust it)")
        }
        let withAnchor = try TrustStore(anchors: [anchor]).verify(leaf: leaf, intermediates: intermediates, at: now)
        lines += withAnchor.problems.map { "# note: even with this anchor, the chain does not verify: \($0)" }
        lines.append("trust = [\(SuggestedEntry.quoted(file))]")
        return lines
    }
}

/// Paths printed for pasting into a config, where a relative path is read against the
/// config's directory.
enum ConfigPaths {
    /// `path` (relative to the working directory, or absolute) as a config in
    /// `configDirectory` must write it: relative to that directory, or absolute without one.
    static func printed(_ path: String, configDirectory: String?) -> String {
        let absolute = URL(fileURLWithPath: path).standardizedFileURL.path
        guard let configDirectory else { return absolute }
        let base = URL(fileURLWithPath: configDirectory, isDirectory: true).standardizedFileURL.pathComponents
        let target = URL(fileURLWithPath: absolute).pathComponents
        var shared = 0
        while shared < base.count, shared < target.count - 1, base[shared] == target[shared] { shared += 1 }
        let ups = Array(repeating: "..", count: base.count - shared)
        return (ups + target[shared...]).joined(separator: "/")
    }
}
