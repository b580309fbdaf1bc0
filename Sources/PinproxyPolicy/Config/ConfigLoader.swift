import Dispatch
import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import TOMLKit

/// Reads a TOML config and checks all of it before anything uses it: unknown keys, wrong
/// types, bad pins, patterns, files and forbidden combinations are errors, each reported with
/// `FILE:LINE`. `pinproxy check`, `evaluate` and the daemon (at start and on reload) all load
/// through here.
///
/// Loading runs in stages, each in its own file: the text is read once (`ConfigLexer`, kept as `ConfigSource`)
/// and parsed, `ConfigDecoder` turns the document into `RawPolicy` values with their key paths,
/// `ConfigRules` checks each one (pure), and `PolicyFiles` reads the files it names and builds
/// its `HostPolicy`. Host entries go through the stages on every core, in slices.
public enum ConfigLoader {
    /// The name diagnostics give the built-in default config.
    public static let embeddedPath = "<embedded>"

    /// Reads and checks the config at `path`; relative paths inside it are resolved against its
    /// directory. Warnings are judged at `now`.
    public static func load(path: String, now: Date = Date()) throws(ConfigError) -> Config {
        let bytes: [UInt8]
        do {
            bytes = try FilePathBytes(path).read(.config)
        } catch {
            let why = switch error {
            case .missing: "no such config file"
            case .tooLarge: "the config file \(error)"
            case .unreadable: "cannot read the config file: \(error)"
            }
            throw ConfigError(diagnostics: [Diagnostic(file: path, line: 0, severity: .error, message: why)])
        }
        return try load(bytes: bytes, path: path, directory: URL(fileURLWithPath: path).deletingLastPathComponent().path, now: now)
    }

    /// The built-in default config: the empty text, so every key has its declared default
    /// (`ConfigSchema`; `config/pinproxy.toml` writes them all, commented out).
    public static func loadEmbedded(now: Date = Date()) throws(ConfigError) -> Config {
        try load(text: "", path: embeddedPath, directory: FileManager.default.currentDirectoryPath, now: now)
    }

    /// Every problem of the config `bytes` (named `path` in diagnostics, relative paths resolved
    /// in `directory`): its errors, or when it loads, its warnings. Never throws or traps,
    /// whatever the bytes: the entry point for fuzzing the loader.
    public static func diagnostics(bytes: [UInt8], path: String, directory: String, now: Date = Date()) -> [Diagnostic] {
        do {
            return try load(bytes: bytes, path: path, directory: directory, now: now).warnings
        } catch {
            return error.diagnostics
        }
    }

    /// Checks the config `bytes`, which must be UTF-8 text.
    public static func load(bytes: [UInt8], path: String, directory: String, now: Date = Date()) throws(ConfigError) -> Config {
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw ConfigError(diagnostics: [Diagnostic(file: path, line: 0, severity: .error, message: "the config is not UTF-8 text")])
        }
        return try load(text: text, path: path, directory: directory, now: now)
    }

    /// Checks config `text`, naming it `path` in diagnostics and resolving relative paths in
    /// `directory`.
    public static func load(text: String, path: String, directory: String, now: Date = Date()) throws(ConfigError) -> Config {
        try load(text: text, path: path, directory: directory, now: now, splitMinimumBytes: ConfigSource.splitMinimumBytes)
    }

    /// `load(text:path:directory:now:)`, parsing in two parts from `splitMinimumBytes` of text
    /// (`Int.max`: never): for tests, which compare the two.
    static func load(text: String, path: String, directory: String, now: Date, splitMinimumBytes: Int) throws(ConfigError) -> Config {
        // While this thread reads the text (`ConfigLexer`, serial) and TOMLKit parses, other
        // cores read the system trust store and the public suffix list.
        let systemStore = InBackground { Result<TrustStore, Error> { try TrustStore.system() } }
        let publicSuffixes = InBackground { Result { () throws(PublicSuffixListError) in try PublicSuffixList.loadSystem() } }
        // Nothing is left running on return: the process may exit right after, and OpenSSL's
        // exit handler must not meet a store being read.
        defer {
            _ = systemStore.result()
            _ = publicSuffixes.result()
        }
        // Then one pass over the text (`ConfigLexer`): text toml++ would abort or overflow its stack
        // on never reaches it, and the lines of headers and keys are recorded.
        let source: ConfigSource
        switch ConfigSource.read(text) {
        case .success(let read): source = read
        case .failure(let refusal):
            throw ConfigError(diagnostics: [Diagnostic(file: path, line: refusal.line, severity: .error, message: refusal.message)])
        }
        // TOMLKit parses on a worker thread, which glibc gives a malloc arena of its own: the
        // document's nodes, freed later on another core (`ConfigDecoder.release`), then never
        // contend for the arena this thread allocates from (90 ms of 0.8 s at 100,000 entries).
        // A large text whose second half holds only host tables is parsed in two parts, one
        // per thread (`ConfigSource.splitOffset`); the second part's hosts join the first's.
        let parse: InBackground<Result<TOMLTable, ConfigError>>
        var secondParse: InBackground<Result<TOMLTable, ConfigError>>?
        let split = source.split(minimumBytes: splitMinimumBytes)
        if let split {
            let middle = text.utf8.index(text.utf8.startIndex, offsetBy: split.offset)
            let first = String(text[..<middle]), second = String(text[middle...])
            parse = InBackground { ConfigDecoder.parse(first, path: path) }
            secondParse = InBackground { ConfigDecoder.parse(second, path: path) }
        } else {
            parse = InBackground { ConfigDecoder.parse(text, path: path) }
        }
        // Meanwhile this thread works out what the host keys alone tell.
        let hostKeys = source.hostKeys()
        let document: TOMLTable
        var secondDocument: TOMLTable?
        switch (parse.result(), secondParse?.result()) {
        case (.success(let parsed), nil):
            document = parsed
        case (.success(let parsed), .success(let secondParsed)?):
            document = parsed
            secondDocument = secondParsed
        case (let first, let second):
            // A part did not parse: the whole text is parsed again, so that a syntax error is
            // reported as the one parse reports it (message and line).
            for case .success(let parsed) in [first, second] { ConfigDecoder.release(parsed) }
            switch ConfigDecoder.parse(text, path: path) {
            case .success(let parsed): document = parsed
            case .failure(let error): throw error
            }
        }
        defer {
            ConfigDecoder.release(document)
            if let secondDocument { ConfigDecoder.release(secondDocument) }
        }
        var load = Load(source: consume source, hostKeys: consume hostKeys, secondHosts: secondDocument?["hosts"]?.table, secondFromLine: split?.line ?? Int.max,
                        files: PolicyFiles(directory: directory, now: now, systemStore: { systemStore.result() }))
        let config = load.config(document, path: path)
        let diagnostics = load.findings.map { load.diagnostic($0, path: path) }
        guard let config, !load.findings.hasErrors else {
            throw ConfigError(diagnostics: diagnostics.filter { $0.severity == .error }.sorted { $0.line < $1.line })
        }
        let publicSuffixList: PublicSuffixList
        switch publicSuffixes.result() {
        case .success(let list): publicSuffixList = list
        case .failure(let error):
            throw ConfigError(diagnostics: [Diagnostic(file: path, line: 1, severity: .error, message: error.description)])
        }
        var loaded = Config(path: path, proxy: config.proxy, resolve: config.resolve, capture: config.capture, policies: config.policies,
                            verdictContext: VerdictContext(publicSuffixes: publicSuffixList, ctLogs: config.ctLogs),
                            clients: config.clients,
                            warnings: diagnostics.filter { $0.severity == .warning }.sorted { $0.line < $1.line })
        // Only a config that captures needs them (the index of every line is built on first use).
        if !config.proxy.transparentListen.isEmpty {
            let transparentListen = load.source.writtenLine(of: ["proxy", "transparent_listen"]) ?? 0
            loaded.lines = Config.KeyLines(transparentListen: transparentListen,
                                           exemptUsers: load.source.writtenLine(of: ["capture", "exempt_users"])
                                               ?? load.source.writtenLine(of: ["capture"]) ?? transparentListen)
        }
        // The source's record and the host keys are half a million allocations at 100,000
        // entries: another core frees them, as it does the documents.
        releaseInBackground(consume load)
        return loaded
    }
}

/// One load: runs the stages over a parsed document and collects every finding.
private struct Load {
    let source: ConfigSource
    /// The host keys of the source's `[hosts."…"]` headers.
    let hostKeys: HostKeys
    /// The `hosts` table of the second part when the text was parsed in two.
    let secondHosts: TOMLTable?
    /// The line the second part starts at (`Int.max` when parsed whole).
    let secondFromLine: Int
    var files: PolicyFiles
    var findings: [Finding] = []

    /// Below this many entries a second core is not worth starting.
    static let entriesPerSlice = 2_000

    /// The config; nil when a finding is an error.
    mutating func config(_ document: TOMLTable, path: String)
        -> (proxy: ProxySettings, resolve: [String: [IPAddress]], capture: CaptureSettings, policies: PolicyTable, clients: ClientRules,
            ctLogs: CTLogs?)? {
        var decoder = ConfigDecoder()
        let decoded = decoder.decodeTopLevel(document)
        findings += Self.captureWarnings(decoded.proxy, decoded.capture)
        var proxy = decoded.proxy
        if let caDirectory = proxy.caDirectory { proxy.caDirectory = files.resolve(caDirectory) }
        if let pidFile = proxy.pidFile { proxy.pidFile = files.resolve(pidFile) }
        if let list = proxy.ctLogList { proxy.ctLogList = files.resolve(list) }
        proxy.reportTo = proxy.reportTo.map { destination in
            if case .file(let path) = destination { return .file(path: files.resolve(path)) }
            return destination
        }

        var defaultEntry: PolicyEntry?
        if document["default"] == nil {
            // No [default]: every key's declared default.
            defaultEntry = Self.entry(RawPolicy.unwritten(path: ["default"], name: "default", pattern: nil), decoded: true, line: 0, proxy: proxy,
                                      files: &files, into: &findings)
        } else if let table = decoder.table("default", in: document) {
            let (raw, decoded) = decoder.decodePolicy(table, ["default"], name: "default", pattern: nil)
            defaultEntry = Self.entry(raw, decoded: decoded, line: source.line(ofTable: "default"), proxy: proxy, files: &files, into: &findings)
        }
        findings = decoder.findings + findings

        var hosts: (entries: [PolicyEntry], positions: PolicyTable.Positions?) = ([], nil)
        if document["hosts"] != nil || secondHosts != nil {
            var hostsDecoder = ConfigDecoder()
            let first = document["hosts"] == nil ? nil : hostsDecoder.table("hosts", in: document)
            if document["hosts"] == nil || first != nil {
                hosts = decodeHosts(HostTables(parts: [first, secondHosts].compactMap { $0 }, secondFromLine: secondFromLine), proxy: proxy)
            }
            findings += hostsDecoder.findings
        }

        var clients = ClientRules()
        if document["clients"] != nil {
            var clientsDecoder = ConfigDecoder()
            if let table = clientsDecoder.table("clients", in: document) {
                let raw = clientsDecoder.decodeClients(table) { [source] key in source.line(of: ["clients", key]) }
                let (rules, found) = ClientRulesCheck.rules(raw)
                clients = rules
                findings += found
            }
            findings += clientsDecoder.findings
        }

        guard !findings.hasErrors, let defaultEntry else { return nil }
        let ctLogs = Self.ctLogs(proxy, entries: [defaultEntry] + hosts.entries, now: files.now, into: &findings)
        guard !findings.hasErrors else { return nil }
        let positions = hosts.positions.flatMap { $0.fit(hosts.entries) ? $0 : nil } ?? PolicyTable.Positions(hosts.entries.map(\.pattern))
        return (proxy, decoded.resolve, decoded.capture, PolicyTable(defaultEntry: defaultEntry, entries: hosts.entries, positions: positions),
                clients, ctLogs)
    }

    /// `ct_log_list`, read: an error when an entry sets `ct` and the list is not given or cannot
    /// be used; a warning when the list is too old to enforce with at `now`, and one naming the
    /// entries that trust the system store without `ct`.
    static func ctLogs(_ proxy: ProxySettings, entries: [PolicyEntry], now: Date, into findings: inout [Finding]) -> CTLogs? {
        let keyPath = ["proxy", "ct_log_list"]
        let judged = entries.filter { $0.policy.ct != .off }
        // An entry with ct and no list is an error of its own (`entry`).
        guard let path = proxy.ctLogList else { return nil }
        let logs: CTLogs
        do {
            logs = try CTLogs.load(path: path)
        } catch {
            let message = "ct_log_list: \(path): \(error)"
            findings.append(judged.isEmpty ? .warning(keyPath, message + " (no entry sets ct, so nothing needs it)") : .error(keyPath, message))
            return nil
        }
        if !judged.isEmpty && logs.list.isStale(at: now) {
            let days = Int(logs.list.age(at: now) / 86_400)
            findings.append(.warning(keyPath, "the CT log list \(path) was published \(days) days ago (log_list_timestamp \(rfc3339(logs.list.published))), more than \(CTLogList.maximumAgeDays): as Chrome does, CT is not enforced with it (ct-missing is logged as would-refuse) until it is replaced"))
        }
        let unjudged = entries.filter { $0.policy.ct == .off && Self.trustsSystem($0.policy.trust) }
        if !unjudged.isEmpty {
            let names = unjudged.prefix(5).map(\.name).joined(separator: ", ") + (unjudged.count > 5 ? ", …" : "")
            findings.append(.warning(keyPath, "\(unjudged.count) entr\(unjudged.count == 1 ? "y trusts" : "ies trust") the system store without ct (\(names)): consider ct = \"enforce\""))
        }
        return logs
    }

    static func trustsSystem(_ trust: HostPolicy.Trust) -> Bool {
        switch trust {
        case .system, .systemAndListed: return true
        case .pinned, .anchors, .none: return false
        }
    }

    /// A transparent listener nothing is redirected to, a `[capture]` with no listener to
    /// redirect to, and an egress lock that would capture pinproxy's own connections.
    static func captureWarnings(_ proxy: ProxySettings, _ capture: CaptureSettings) -> [Finding] {
        var found: [Finding] = []
        if !proxy.transparentListen.isEmpty && capture.ports.isEmpty {
            found.append(.warning(["capture", "ports"], "proxy.transparent_listen is set, but capture.ports is empty: `pinproxy egress` redirects nothing to it"))
        }
        if proxy.transparentListen.isEmpty && capture.isWritten && !capture.ports.isEmpty {
            found.append(.warning(["capture"], "[capture] names ports, but proxy.transparent_listen is empty: `pinproxy egress apply` has no listener to redirect them to"))
        }
        if !capture.forwardInterfaces.isEmpty && !proxy.transparentListen.contains(where: { $0.address == IPAddress("0.0.0.0") }) {
            found.append(.error(["capture", "forward_interfaces"], "capture.forward_interfaces needs proxy.transparent_listen on the wildcard addresses (\"0.0.0.0:PORT\" and \"[::]:PORT\", the privileged port): `redirect` in prerouting delivers a forwarded connection to the address of the interface it arrives on, never to loopback"))
        }
        if !proxy.transparentListen.isEmpty && capture.exemptUsers.isEmpty {
            found.append(.warning(["capture", "exempt_users"], "capture.exempt_users is empty: under the egress lock pinproxy's own upstream connections are captured too, and refused (capture-loop)"))
        }
        return found
    }

    /// Stages 2 and 3 for one entry: its rules, then its files. An entry with an error still has
    /// its files read, so that one pass reports every problem: rules are judged only on an entry
    /// that decoded without error (a key that did not decode would read as its default).
    static func entry(_ raw: RawPolicy, decoded: Bool, line: Int, proxy: ProxySettings, files: inout PolicyFiles,
                      into findings: inout [Finding]) -> PolicyEntry? {
        var found = decoded ? ConfigRules.check(raw, now: files.now) : []
        if decoded && raw.ct != .off && proxy.ctLogList == nil {
            found.append(.error(raw.path + ["ct"], "\(raw.name) has ct = \"\(raw.ct.rawValue)\" but [proxy] ct_log_list is not set: CT needs the list of the logs whose SCTs count (in the format of Chrome's log_list.json)"))
        }
        findings += found
        guard decoded, !found.hasErrors else {
            findings += files.read(raw).1.filter { $0.severity == .error }
            return nil
        }
        let (policy, more) = files.policy(raw, defaultPorts: proxy.allowPorts)
        findings += more
        guard let policy else { return nil }
        return PolicyEntry(pattern: raw.pattern, name: raw.name, line: line, policy: policy, written: raw.writtenFiles)
    }

    /// The host entries that load without error, in file order, and their table positions.
    /// Usually every entry has its own `[hosts."…"]` header and the keys come from the source scan,
    /// worked out already; entries written otherwise (inline tables, dotted keys) send the
    /// loader to TOMLKit's keys, sorted by line.
    mutating func decodeHosts(_ table: HostTables, proxy: ProxySettings)
        -> (entries: [PolicyEntry], positions: PolicyTable.Positions?) {
        var hosts = hostKeys
        var entries: [PolicyEntry]?
        // The same number of distinct keys, each found in the table: the same keys.
        if hosts.distinct && hosts.keys.count == table.count { entries = hostEntries(hosts.keys, in: table, proxy: proxy) }
        if entries == nil {
            hosts = HostKeys(table.keys.map { (key: $0, line: source.line(of: ["hosts", $0])) }.sorted { ($0.line, $0.key) < ($1.line, $1.key) })
            entries = hostEntries(hosts.keys, in: table, proxy: proxy)
            if entries == nil { findings.append(.error(["hosts"], "hosts: TOMLKit lists a key it cannot look up")) }
        }
        for (again, first) in hosts.duplicates {
            let (key, earlier) = (hosts.keys[again].key, hosts.keys[first])
            findings.append(.error(["hosts", key], "\(displayKeyPath(["hosts", key])) is the same pattern as \(displayKeyPath(["hosts", earlier.key])) (line \(earlier.line)) once normalised"))
        }
        return (entries ?? [], hosts.positions)
    }

    /// Every stage for the entries named by `keys`, on every core in file-ordered slices, merged
    /// back in order with their findings; nil (and nothing reported) when a key is not in `table`.
    mutating func hostEntries(_ keys: [HostKeys.Key], in table: HostTables, proxy: ProxySettings) -> [PolicyEntry]? {
        typealias Slice = (entries: [PolicyEntry], findings: [Finding])
        let sliceCount = min(ProcessInfo.processInfo.activeProcessorCount, max(1, keys.count / Self.entriesPerSlice))
        let shared = UncheckedSendable(value: (table: table, files: files, keys: keys))
        let results = SliceResults<Slice?>(count: sliceCount)
        DispatchQueue.concurrentPerform(iterations: sliceCount) { index in
            let (table, template, keys) = shared.value
            results.store(index, Self.hostSlice(keys[(keys.count * index / sliceCount)..<(keys.count * (index + 1) / sliceCount)],
                                                in: table, proxy: proxy, files: template))
        }
        guard let slices = results.all else { return nil }
        var entries: [PolicyEntry] = []
        entries.reserveCapacity(keys.count)
        for slice in slices {
            guard let slice else { return nil }
            entries += slice.entries
            findings += slice.findings
        }
        return entries
    }

    /// Every stage for the hosts of one slice, in order; nil when a key is not in `table`.
    static func hostSlice(_ slice: ArraySlice<HostKeys.Key>, in table: HostTables, proxy: ProxySettings,
                          files template: PolicyFiles) -> (entries: [PolicyEntry], findings: [Finding])? {
        var decoder = ConfigDecoder()
        var files = template
        var entries: [PolicyEntry] = []
        var findings: [Finding] = []
        entries.reserveCapacity(slice.count)
        for host in slice {
            guard let value = table[host.key, line: host.line] else { return nil }
            let keyPath = ["hosts", host.key]
            let name = displayKeyPath(keyPath)
            guard let entryTable = value.table else {
                decoder.typeError(keyPath, value, expected: "a table such as [hosts.\"\(host.key)\"]")
                continue
            }
            guard let pattern = host.pattern else {
                decoder.error(keyPath, "\(name): invalid host pattern: use a DNS name in LDH ASCII (xn-- form for internationalised names), \"*.\" followed by a name, or an IP literal")
                continue
            }
            let (raw, decoded) = decoder.decodePolicy(entryTable, keyPath, name: name, pattern: pattern)
            if let entry = entry(raw, decoded: decoded, line: host.line, proxy: proxy, files: &files, into: &findings) { entries.append(entry) }
        }
        return (entries, decoder.findings + findings)
    }

    /// `finding` placed on its line of `path`.
    func diagnostic(_ finding: Finding, path: String) -> Diagnostic {
        let line = finding.element.map { source.line(of: finding.keyPath, containing: "\"\($0)\"") } ?? source.line(of: finding.keyPath)
        return Diagnostic(file: path, line: line, severity: finding.severity, message: finding.message)
    }
}

/// The `hosts` table, in one part or (parsed in two) two, whose keys are distinct.
struct HostTables {
    let parts: [TOMLTable]
    /// The line the second part starts at: a key written from there is looked up there first.
    let secondFromLine: Int

    subscript(key: String, line line: Int) -> TOMLValueConvertible? {
        if parts.count > 1 && line >= secondFromLine, let value = parts[1][key] { return value }
        for part in parts { if let value = part[key] { return value } }
        return nil
    }

    var count: Int { parts.reduce(0) { $0 + $1.count } }
    var keys: [String] { parts.flatMap(\.keys) }
}
