import Glibc
import FoundationEssentials
import PinproxyInterop
import PinproxyPolicy
import PinproxyCore

/// The block `diagnose` suggests for HOST: the entry that applied to it, complete (its trust,
/// host check, ports, TLS floor, revocation, CT, custom check, report-only), pinned so that it
/// survives a renewal (the leaf's key and its issuing CA's, even where that CA is the anchor).
/// Pasted in place of that entry (or as a new one), it passes `check` and allows that server.
struct SuggestedEntry {
    let host: TargetHost
    let port: UInt16
    let chain: [Certificate]
    let entry: PolicyEntry
    let verdict: Verdict
    /// The ports a host entry without `ports` gets (`proxy.allow_ports`).
    let allowPorts: Set<UInt16>
    /// The config read (nil: the built-in default): its anchors are searched for the issuer of
    /// a chain that the entry cannot verify.
    let config: Config?
    /// The issuer the leaf's AIA URL served, fetched when `needsIssuer`: offered only as an
    /// intermediate towards an anchor the config or the system store already has.
    var fetchedIssuer: AIAIssuer? = nil

    func render() throws -> String {
        let policy = entry.policy
        var before: [String] = [entry.pattern == nil ? "# a new entry: only [default] applied to this host"
                                                     : "# replaces \(entry.name)" + (entry.line > 0 ? " (line \(entry.line))" : "")]
        if let fetchedIssuer, case .success(let issuer) = fetchedIssuer.result {
            if let completed = try knownAnchor(adding: [issuer], how: "with the issuer fetched from the leaf's AIA URL, the leaf verifies") {
                return completion(completed, issuer: issuer, url: fetchedIssuer.url, header: before)
            }
            before.append("# the issuer fetched from the leaf's AIA URL (\(fetchedIssuer.url)) completes no path to an anchor this config or the system store has")
        }
        let proposal = try trustProposal()
        before += proposal.lines
        let keys = Self.otherKeys(of: entry, host: host, ports: policy.ports.union([port]), allowPorts: allowPorts, keepEnforce: true)
        return PinCommand.hostBlock(host: host, path: proposal.path, before: before + keys.before, after: keys.after)
    }

    /// Whether the chain as sent reaches no anchor because the server sent its leaf alone or
    /// without the certificate that issued it, which neither the config nor the system store has:
    /// then the leaf's AIA URL is worth fetching.
    var needsIssuer: Bool {
        get throws {
            guard let leaf = chain.first, !leaf.isSelfIssued,
                  verdict.failures.contains(where: { $0.reason == .untrustedChain }),
                  !chain.dropFirst().contains(where: { leaf.isIssued(by: $0) }) else { return false }
            return try knownAnchor() == nil
        }
    }

    /// The text for a leaf that verifies to a known anchor only through the issuer its AIA URL
    /// served. pinproxy verifies only the chain a server sends, so the daemon refuses that server
    /// until it sends its intermediate; the block that allows it once the server sends its intermediate
    /// is shown commented out, its fetched key marked.
    func completion(_ known: (lines: [String], path: [Certificate]), issuer: Certificate, url: String, header: [String]) -> String {
        let keys = Self.otherKeys(of: entry, host: host, ports: entry.policy.ports.union([port]), allowPorts: allowPorts, keepEnforce: true)
        // An empty `known.lines` is the system store, which needs no trust line.
        let anchor = known.lines.isEmpty
            ? ["# with the issuer fetched from the leaf's AIA URL, the leaf verifies to the system trust store: \(known.path.last?.subject ?? "-")"]
            : known.lines
        let block = PinCommand.hostBlock(host: host, path: known.path, before: header + anchor + keys.before, after: keys.after)
        let fetchedPin = "\"\(Pin(digest: issuer.publicKeySHA256))\","
        let marked = block.split(separator: "\n", omittingEmptySubsequences: false).map { line in
            line.contains(fetchedPin) ? line + "; fetched from the AIA URL \(url), unverified until the path to the anchor verifies" : String(line)
        }
        return ([
            "# no block to paste yet: the server sends its leaf without \(issuer.subject), the intermediate that",
            "# issued it, and pinproxy verifies only the chain a server sends (it fetches nothing), so the daemon",
            "# refuses this server (untrusted-chain) until it sends that intermediate after its leaf: the server",
            "# must be fixed. Once it is, this block allows it (remove the \"# \" before each line):",
        ] + marked.map { "# " + $0 }).joined(separator: "\n")
    }

    /// The keys of `entry` a block that replaces it keeps, besides `trust` and its pins: those
    /// written before the pins (`validate_host`) and after them (`ports`, `min_tls`, ...).
    /// `ports` are the ones the block needs; `enforce = false` is kept only if `keepEnforce`.
    static func otherKeys(of entry: PolicyEntry, host: TargetHost, ports: Set<UInt16>, allowPorts: Set<UInt16>,
                          keepEnforce: Bool) -> (before: [String], after: [String]) {
        let policy = entry.policy
        var before: [String] = []
        if !policy.validateHost { before.append("validate_host = false") }
        var after: [String] = []
        if ports != allowPorts { after.append("ports = [\(ports.sorted().map(String.init).joined(separator: ", "))]") }
        if policy.minTLS != .v1_2 { after.append("min_tls = \(quoted(policy.minTLS.rawValue))") }
        if case .off = policy.revocation {} else { after.append("revocation = \(quoted(policy.revocation.name))") }
        if let crls = entry.written.crls { after.append("crls = \(list(crls))") }
        if policy.ct != .off { after.append("ct = \(quoted(policy.ct.rawValue))") }
        if !policy.requireWebPKIProfile { after.append("require_web_pki_profile = false") }
        if let command = policy.verifyCommand { after.append("verify_command = \(list(command))") }
        if policy.includeSubdomains, entry.pattern?.description == host.description { after.append("include_subdomains = true") }
        if keepEnforce && !policy.enforce { after.append("enforce = false") }
        return (before, after)
    }

    /// The `trust` lines of the block and the path its pins come from (leaf first).
    /// The entry's own `trust` and the path it verified, unless the chain does not verify to
    /// it (or the entry's anchors are its pinned certificates, which the new pins replace):
    /// then an anchor the config or the system store already has, where one issued the chain
    /// as sent; else the top CA certificate the server sent (never a leaf that is not
    /// self-signed).
    func trustProposal() throws -> (lines: [String], path: [Certificate]) {
        var own: [String] = []
        var pinnedAnchors = false
        switch entry.policy.trust {
        case .pinned: pinnedAnchors = true
        case .system: break
        case .none: own = ["trust = \"none\""]
        case .anchors, .systemAndListed: own = entry.written.trust.map { ["trust = \(Self.list($0))"] } ?? []
        }
        let untrusted = verdict.failures.contains { $0.reason == .untrustedChain }
        if !untrusted && !pinnedAnchors { return (own, verdict.verifiedPath ?? chain) }
        if let known = try knownAnchor() { return known }
        let lines = try PinCommand.trustLines(for: chain, host: host, saveAnchor: nil)
        // No anchor to propose (a leaf sent alone, not self-signed): the entry's own trust stays.
        let proposesAnchor = lines.contains { $0.hasPrefix("trust = ") }
        return (proposesAnchor || pinnedAnchors ? lines : lines + own, chain)
    }

    /// The system store, or an anchor that the config's entries already list, to which the chain
    /// as sent verifies: the `trust` line naming it (none for the system store) and the path.
    /// `adding` offers more intermediates (never anchors) to the path; `how` begins the comment.
    func knownAnchor(adding extra: [Certificate] = [], how: String = "the chain as sent verifies") throws -> (lines: [String], path: [Certificate])? {
        guard let leaf = chain.first else { return nil }
        let intermediates = Array(chain.dropFirst()) + extra
        let now = Date()
        let system = try TrustStore.system().verify(leaf: leaf, intermediates: intermediates, at: now)
        if system.isVerified {
            return ([], system.chain)
        }
        guard let config else { return nil }
        let directory = URL(fileURLWithPath: config.path).deletingLastPathComponent().path
        var tried: Set<String> = []
        for candidate in [config.policies.defaultEntry] + config.policies.entries {
            for file in candidate.written.trust ?? [] where file != "system" && tried.insert(file).inserted {
                let anchors = Self.certificates(at: file.hasPrefix("/") ? file : directory + "/" + file)
                guard !anchors.isEmpty else { continue }
                let verified = try TrustStore(anchors: anchors).verify(leaf: leaf, intermediates: intermediates, at: now)
                guard verified.isVerified, let anchor = verified.chain.last else { continue }
                return (["# \(how) to an anchor this config already lists (in \(candidate.name)" +
                         (candidate.line > 0 ? ", line \(candidate.line)" : "") + "): \(anchor.subject)",
                         "trust = \(Self.list([file]))"], verified.chain)
            }
        }
        return nil
    }

    /// The certificates of a `trust` file (or of the certificate files of a directory); none
    /// where it cannot be read.
    static func certificates(at path: String) -> [Certificate] {
        var status = stat()
        guard stat(path, &status) == 0 else { return [] }
        let files = status.st_mode & S_IFMT == S_IFDIR
            ? ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted().map { path + "/" + $0 }
            : [path]
        return files.flatMap { file in
            FileManager.default.contents(atPath: file).flatMap { try? Certificate.parseAll([UInt8]($0)) } ?? []
        }
    }

    /// A TOML array of basic strings.
    static func list(_ values: [String]) -> String {
        "[" + values.map(quoted).joined(separator: ", ") + "]"
    }

    /// A TOML basic string: quotes, backslashes and control characters escaped.
    static func quoted(_ text: String) -> String {
        var result = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F: result += "\\u" + scalar.value.hex(digits: 4, uppercase: true)
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result + "\""
    }
}
