import Foundation
import PinproxyInterop
import TOMLKit

/// Reads a TOML config and checks all of it before anything uses it: unknown keys, wrong
/// types, bad pins, patterns, files and forbidden combinations are errors, each reported with
/// `FILE:LINE`. `pinproxy check`, `evaluate` and the daemon (at start and on reload) all load
/// through here.
public enum ConfigLoader {
    /// The name diagnostics give the built-in default config.
    public static let embeddedPath = "<embedded>"

    /// Reads and checks the config at `path`; relative paths inside it are resolved against its
    /// directory. Warnings are judged at `now`.
    public static func load(path: String, now: Date = Date()) throws(ConfigError) -> Config {
        guard let data = FileManager.default.contents(atPath: path) else {
            let why = FileManager.default.fileExists(atPath: path) ? "cannot read the config file" : "no such config file"
            throw ConfigError(diagnostics: [Diagnostic(file: path, line: 0, severity: .error, message: why)])
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw ConfigError(diagnostics: [Diagnostic(file: path, line: 0, severity: .error, message: "the config is not UTF-8 text")])
        }
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
        return try load(text: text, path: path, directory: directory, now: now)
    }

    /// The built-in default config (`config/pinproxy.toml`, compiled in).
    public static func loadEmbedded(now: Date = Date()) throws(ConfigError) -> Config {
        try load(text: DefaultConfig.text, path: embeddedPath, directory: FileManager.default.currentDirectoryPath, now: now)
    }

    /// Checks config `text`, naming it `path` in diagnostics and resolving relative paths in
    /// `directory`.
    public static func load(text: String, path: String, directory: String, now: Date = Date()) throws(ConfigError) -> Config {
        // toml++ aborts on some invalid input rather than reporting it: refused first.
        if let problem = ConfigText.problemBeforeParsing(text) {
            throw ConfigError(diagnostics: [Diagnostic(file: path, line: problem.line, severity: .error, message: problem.message)])
        }
        // While TOMLKit parses, other cores build the line index, work out what the host keys
        // alone tell, and read the system trust store.
        let indexing = InBackground { () -> (SourceIndex, HostKeys) in
            let index = SourceIndex(text)
            return (index, HostKeys(index.tables(under: "hosts")))
        }
        let systemStore = InBackground { Result { try TrustStore.system() } }
        // Nothing is left running on return: the process may exit right after, and OpenSSL's
        // exit handler must not meet a store being read.
        defer {
            _ = indexing.result()
            _ = systemStore.result()
        }
        let parsing = Result { try TOMLTable(string: text) }
        let (index, writtenHosts) = indexing.result()
        // TOMLKit hands the text and every key to C, which ends a string at U+0000: whatever
        // follows one would be cut off without a word.
        if let line = index.nulLine {
            if case .success(let document) = parsing { free(document) }
            throw ConfigError(diagnostics: [Diagnostic(file: path, line: line, severity: .error,
                                                       message: "the config holds U+0000 (NUL), as a byte or as an escape: pinproxy cannot read past it")])
        }
        let document: TOMLTable
        switch parsing {
        case .success(let parsed):
            document = parsed
        case .failure(let error as TOMLParseError):
            throw ConfigError(diagnostics: [Diagnostic(file: path, line: max(1, error.source.begin.line), severity: .error,
                                                       message: "TOML syntax: \(error.description)")])
        case .failure(let error):
            throw ConfigError(diagnostics: [Diagnostic(file: path, line: 1, severity: .error, message: "TOML syntax: \(error)")])
        }
        var loader = Loader(path: path, directory: directory, now: now, index: index, writtenHosts: writtenHosts, systemStore: systemStore)
        let config = loader.load(document)
        free(document)
        guard let config, loader.errors.isEmpty else {
            throw ConfigError(diagnostics: loader.errors.sorted { $0.line < $1.line })
        }
        return config
    }

    /// TOMLKit never frees a parsed document: its nodes are freed here, on another core,
    /// because freeing 100,000 entries takes as long as parsing them. Nothing keeps a TOMLKit
    /// value past a load.
    private static func free(_ document: TOMLTable) {
        let parsed = UncheckedSendable(value: document)
        DispatchQueue.global(qos: .utility).async { parsed.value.clear() }
    }
}

/// One load: collects every error and warning instead of stopping at the first.
private struct Loader {
    let path: String
    let directory: String
    let now: Date
    let index: SourceIndex
    /// The keys of the `[hosts."…"]` headers the index found.
    let writtenHosts: HostKeys
    var errors: [Diagnostic] = []
    var warnings: [Diagnostic] = []
    private var certificateFiles: [String: [Certificate]] = [:]
    /// The system trust store, read on another core while TOMLKit parses: most configs use it.
    private let systemStore: InBackground<Result<TrustStore, Error>>

    static let topLevelKeys = ["proxy", "resolve", "default", "hosts"]
    static let proxyKeys = ["listen", "ca_dir", "allow_ports", "block_private_destinations", "metrics_listen",
                            "log_format", "workers", "request_timeout", "dns_timeout", "connect_timeout",
                            "handshake_timeout", "idle_timeout", "drain_timeout", "max_connections",
                            "relay_buffer_bytes"]
    static let policyKeys = ["action", "trust", "validate_host", "pin", "pins", "certificates", "enforce", "expires",
                             "include_subdomains", "ports", "min_tls", "mode", "revocation", "crls"]
    static let certificateExtensions: Set<String> = ["pem", "crt", "cer", "der"]
    static let warningWindow: TimeInterval = 30 * 86_400

    init(path: String, directory: String, now: Date, index: SourceIndex, writtenHosts: HostKeys,
         systemStore: InBackground<Result<TrustStore, Error>>) {
        self.path = path
        self.directory = directory
        self.now = now
        self.index = index
        self.writtenHosts = writtenHosts
        self.systemStore = systemStore
    }

    // MARK: Diagnostics

    mutating func error(_ keyPath: [String], _ message: String) {
        errors.append(Diagnostic(file: path, line: index.line(of: keyPath), severity: .error, message: message))
    }

    mutating func error(_ keyPath: [String], element: String, _ message: String) {
        let line = index.line(of: keyPath, containing: "\"\(element)\"")
        errors.append(Diagnostic(file: path, line: line, severity: .error, message: message))
    }

    mutating func warn(_ keyPath: [String], _ message: String) {
        warnings.append(Diagnostic(file: path, line: index.line(of: keyPath), severity: .warning, message: message))
    }

    /// `hosts."api.test".pins` or `proxy.listen`.
    static func display(_ keyPath: [String]) -> String {
        var result = ""
        for key in keyPath {
            if !result.isEmpty { result += "." }
            if !key.isEmpty && key.utf8.allSatisfy(SourceIndex.isBareKeyByte) { result += key } else { result += "\"\(key)\"" }
        }
        return result
    }

    mutating func unknownKey(_ keyPath: [String], known: [String]) {
        let key = keyPath.last!
        var message = "unknown key \(Self.display(keyPath))"
        if let close = known.min(by: { editDistance($0, key) < editDistance($1, key) }), editDistance(close, key) <= 2 {
            message += " (did you mean \"\(close)\"?)"
        }
        error(keyPath, message)
    }

    // MARK: Typed values

    mutating func typeError(_ keyPath: [String], _ value: TOMLValueConvertible, expected: String) {
        error(keyPath, "\(Self.display(keyPath)) must be \(expected), not \(withArticle(value.type))")
    }

    // The readers below take their key path as an autoclosure: an entry's key paths are
    // built only when a diagnostic needs one.

    mutating func string(_ value: TOMLValueConvertible, _ keyPath: @autoclosure () -> [String]) -> String? {
        if let string = value.string { return string }
        typeError(keyPath(), value, expected: "a string")
        return nil
    }

    mutating func bool(_ value: TOMLValueConvertible, _ keyPath: @autoclosure () -> [String]) -> Bool? {
        if let bool = value.bool { return bool }
        typeError(keyPath(), value, expected: "true or false")
        return nil
    }

    mutating func seconds(_ value: TOMLValueConvertible, _ keyPath: [String]) -> TimeInterval? {
        let number = value.double ?? value.int.map(Double.init)
        guard let number else {
            typeError(keyPath, value, expected: "a number of seconds")
            return nil
        }
        guard number > 0, number <= 86_400 else {
            error(keyPath, "\(Self.display(keyPath)) must be more than 0 and at most 86400 seconds")
            return nil
        }
        return number
    }

    mutating func integer(_ value: TOMLValueConvertible, _ keyPath: [String], in range: ClosedRange<Int>) -> Int? {
        guard let number = value.int else {
            typeError(keyPath, value, expected: "an integer")
            return nil
        }
        guard range.contains(number) else {
            error(keyPath, "\(Self.display(keyPath)) must be between \(range.lowerBound) and \(range.upperBound)")
            return nil
        }
        return number
    }

    mutating func strings(_ value: TOMLValueConvertible, _ keyPath: @autoclosure () -> [String], allowEmpty: Bool = true) -> [String]? {
        guard let array = value.array else {
            typeError(keyPath(), value, expected: "an array of strings")
            return nil
        }
        var result: [String] = []
        for element in array {
            guard let string = element.string else {
                error(keyPath(), "\(Self.display(keyPath())) must be an array of strings, and holds \(withArticle(element.type))")
                return nil
            }
            result.append(string)
        }
        if !allowEmpty && result.isEmpty {
            error(keyPath(), "\(Self.display(keyPath())) must not be empty")
            return nil
        }
        return result
    }

    mutating func choice<T: RawRepresentable & CaseIterable>(_ value: TOMLValueConvertible, _ keyPath: @autoclosure () -> [String], _ type: T.Type) -> T? where T.RawValue == String {
        guard let text = string(value, keyPath()) else { return nil }
        if let parsed = T(rawValue: text) { return parsed }
        let allowed = T.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")
        error(keyPath(), "\(Self.display(keyPath())) = \"\(text)\" is not one of \(allowed)")
        return nil
    }

    mutating func ports(_ value: TOMLValueConvertible, _ keyPath: @autoclosure () -> [String]) -> Set<UInt16>? {
        guard let array = value.array, !array.isEmpty else {
            if value.array == nil { typeError(keyPath(), value, expected: "an array of port numbers") } else {
                error(keyPath(), "\(Self.display(keyPath())) must not be empty")
            }
            return nil
        }
        var result: Set<UInt16> = []
        for element in array {
            guard let port = element.int, (1...65_535).contains(port) else {
                error(keyPath(), "\(Self.display(keyPath())) must hold port numbers from 1 to 65535, and holds \(element.debugDescription)")
                return nil
            }
            result.insert(UInt16(port))
        }
        return result
    }

    // MARK: Files

    func resolve(_ file: String) -> String {
        file.hasPrefix("/") ? file : URL(fileURLWithPath: directory).appendingPathComponent(file).path
    }

    /// Loads every certificate in the listed files and directories (each certificate file: PEM
    /// bundle or DER; in a directory, files ending .pem .crt .cer .der in any case).
    mutating func certificates(_ files: [String], _ keyPath: @autoclosure () -> [String], what: String) -> [Certificate]? {
        var result: [Certificate] = []
        var failed = false
        for file in files {
            let resolved = resolve(file)
            if let cached = certificateFiles[resolved] {
                result += cached
                continue
            }
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: resolved, isDirectory: &isDirectory) else {
                error(keyPath(), element: file, "\(what) \"\(file)\" does not exist (\(resolved))")
                failed = true
                continue
            }
            var loaded: [Certificate] = []
            if isDirectory.boolValue {
                let names = (try? FileManager.default.contentsOfDirectory(atPath: resolved)) ?? []
                let certificateNames = names.filter { Self.certificateExtensions.contains(($0 as NSString).pathExtension.lowercased()) }.sorted()
                if certificateNames.isEmpty {
                    error(keyPath(), element: file, "\(what) directory \"\(file)\" holds no .pem, .crt, .cer or .der file")
                    failed = true
                    continue
                }
                for name in certificateNames {
                    guard let parsed = certificateFile(resolved + "/" + name, shownAs: file + "/" + name, keyPath(), element: file, what: what) else {
                        failed = true
                        continue
                    }
                    loaded += parsed
                }
            } else {
                guard let parsed = certificateFile(resolved, shownAs: file, keyPath(), element: file, what: what) else {
                    failed = true
                    continue
                }
                loaded = parsed
            }
            certificateFiles[resolved] = loaded
            result += loaded
        }
        return failed ? nil : result
    }

    mutating func certificateFile(_ resolved: String, shownAs file: String, _ keyPath: @autoclosure () -> [String], element: String, what: String) -> [Certificate]? {
        guard let data = FileManager.default.contents(atPath: resolved) else {
            error(keyPath(), element: element, "\(what) \"\(file)\" cannot be read")
            return nil
        }
        do {
            return try Certificate.parseAll(Array(data))
        } catch {
            self.error(keyPath(), element: element, "\(what) \"\(file)\" holds no PEM or DER certificate")
            return nil
        }
    }

    mutating func revocationLists(_ files: [String], _ keyPath: @autoclosure () -> [String]) -> [RevocationList]? {
        var result: [RevocationList] = []
        var failed = false
        for file in files {
            let resolved = resolve(file)
            guard let data = FileManager.default.contents(atPath: resolved) else {
                let why = FileManager.default.fileExists(atPath: resolved) ? "cannot be read" : "does not exist (\(resolved))"
                error(keyPath(), element: file, "CRL file \"\(file)\" \(why)")
                failed = true
                continue
            }
            do {
                result += try RevocationList.parseAll(Array(data))
            } catch {
                self.error(keyPath(), element: file, "CRL file \"\(file)\" holds no PEM or DER CRL")
                failed = true
            }
        }
        return failed ? nil : result
    }

    mutating func system(_ keyPath: [String]) -> TrustStore? {
        switch systemStore.result() {
        case .success(let store):
            return store
        case .failure(let error):
            self.error(keyPath, "cannot load the system trust store: \(error)")
            return nil
        }
    }

    // MARK: The document

    mutating func load(_ document: TOMLTable) -> Config? {
        for key in document.keys where !Self.topLevelKeys.contains(key) {
            unknownKey([key], known: Self.topLevelKeys)
        }
        var proxy = ProxySettings()
        if let value = document["proxy"] {
            if let table = value.table { parseProxy(table, into: &proxy) } else { typeError(["proxy"], value, expected: "a table") }
        }
        var resolve: [String: [IPAddress]] = [:]
        if let value = document["resolve"] {
            if let table = value.table { resolve = parseResolve(table) } else { typeError(["resolve"], value, expected: "a table") }
        }

        var defaultEntry: PolicyEntry?
        if let value = document["default"] {
            if let table = value.table {
                if let policy = parsePolicy(table, ["default"], name: "default", pattern: nil, proxy: proxy) {
                    defaultEntry = PolicyEntry(pattern: nil, name: "default", line: index.line(ofTable: "default"), policy: policy)
                }
            } else {
                typeError(["default"], value, expected: "a table")
            }
        } else if let store = system(["default"]) {
            defaultEntry = PolicyEntry(pattern: nil, name: "default", line: 0,
                                       policy: HostPolicy(trust: .system(store), ports: proxy.allowPorts))
        }

        var hosts: (entries: [PolicyEntry], positions: PolicyTable.Positions?) = ([], nil)
        if let value = document["hosts"] {
            if let table = value.table { hosts = parseHosts(table, proxy: proxy) } else { typeError(["hosts"], value, expected: "a table") }
        }

        guard errors.isEmpty, let defaultEntry else { return nil }
        let positions = hosts.positions.flatMap { $0.fit(hosts.entries) ? $0 : nil } ?? PolicyTable.Positions(hosts.entries.map(\.pattern))
        return Config(path: path, proxy: proxy, resolve: resolve,
                      policies: PolicyTable(defaultEntry: defaultEntry, entries: hosts.entries, positions: positions),
                      warnings: warnings.sorted { $0.line < $1.line })
    }

    mutating func parseProxy(_ table: TOMLTable, into proxy: inout ProxySettings) {
        for (key, value) in table {
            let keyPath = ["proxy", key]
            switch key {
            case "listen":
                guard let texts = strings(value, keyPath, allowEmpty: false) else { continue }
                var addresses: [ListenAddress] = []
                for text in texts {
                    guard let address = ListenAddress(text) else {
                        error(keyPath, element: text, "proxy.listen: \"\(text)\" is not IP:PORT (for example \"127.0.0.1:3128\" or \"[::1]:3128\")")
                        continue
                    }
                    addresses.append(address)
                }
                proxy.listen = addresses
            case "ca_dir":
                if let text = string(value, keyPath) {
                    if text.isEmpty { error(keyPath, "proxy.ca_dir must not be empty") } else { proxy.caDirectory = resolve(text) }
                }
            case "allow_ports":
                if let ports = ports(value, keyPath) { proxy.allowPorts = ports }
            case "block_private_destinations":
                if let flag = bool(value, keyPath) { proxy.blockPrivateDestinations = flag }
            case "metrics_listen":
                guard let text = string(value, keyPath) else { continue }
                if let address = ListenAddress(text) { proxy.metricsListen = address } else {
                    error(keyPath, "proxy.metrics_listen: \"\(text)\" is not IP:PORT (for example \"127.0.0.1:9128\")")
                }
            case "log_format":
                if let format = choice(value, keyPath, ProxySettings.LogFormat.self) { proxy.logFormat = format }
            case "workers":
                if let count = integer(value, keyPath, in: 1...256) { proxy.workers = count }
            case "max_connections":
                if let count = integer(value, keyPath, in: 1...1_000_000) { proxy.maxConnections = count }
            case "relay_buffer_bytes":
                if let count = integer(value, keyPath, in: 4_096...(64 << 20)) { proxy.relayBufferBytes = count }
            case "request_timeout":
                if let seconds = seconds(value, keyPath) { proxy.requestTimeout = seconds }
            case "dns_timeout":
                if let seconds = seconds(value, keyPath) { proxy.dnsTimeout = seconds }
            case "connect_timeout":
                if let seconds = seconds(value, keyPath) { proxy.connectTimeout = seconds }
            case "handshake_timeout":
                if let seconds = seconds(value, keyPath) { proxy.handshakeTimeout = seconds }
            case "idle_timeout":
                if let seconds = seconds(value, keyPath) { proxy.idleTimeout = seconds }
            case "drain_timeout":
                if let seconds = seconds(value, keyPath) { proxy.drainTimeout = seconds }
            default:
                unknownKey(keyPath, known: Self.proxyKeys)
            }
        }
    }

    mutating func parseResolve(_ table: TOMLTable) -> [String: [IPAddress]] {
        var result: [String: [IPAddress]] = [:]
        for (key, value) in table {
            let keyPath = ["resolve", key]
            guard case .name(let name) = TargetHost(key) else {
                error(keyPath, "resolve: \"\(key)\" is not a host name")
                continue
            }
            let texts: [String]?
            if let single = value.string { texts = [single] } else if value.array != nil { texts = strings(value, keyPath, allowEmpty: false) } else {
                typeError(keyPath, value, expected: "an IP address or an array of them")
                texts = nil
            }
            guard let texts else { continue }
            var addresses: [IPAddress] = []
            for text in texts {
                guard let address = IPAddress(text) else {
                    error(keyPath, element: text, "resolve.\"\(key)\": \"\(text)\" is not an IP address")
                    continue
                }
                addresses.append(address)
            }
            if result[name] != nil { error(keyPath, "resolve: \"\(key)\" is given twice") }
            result[name] = addresses
        }
        return result
    }

    /// The host entries that parse without error, in file order, and their table positions.
    /// Usually every entry has its own `[hosts."…"]` header and the keys come from the index,
    /// worked out already; entries written otherwise (inline tables, dotted keys) send the
    /// loader to TOMLKit's keys, sorted by line.
    mutating func parseHosts(_ table: TOMLTable, proxy: ProxySettings) -> (entries: [PolicyEntry], positions: PolicyTable.Positions?) {
        var hosts = writtenHosts
        var entries: [PolicyEntry]?
        // The same number of distinct keys, each found in the table: the same keys.
        if hosts.distinct && hosts.keys.count == table.count { entries = parseHostEntries(hosts.keys, in: table, proxy: proxy) }
        if entries == nil {
            hosts = HostKeys(table.keys.map { (key: $0, line: index.line(of: ["hosts", $0])) }.sorted { ($0.line, $0.key) < ($1.line, $1.key) })
            entries = parseHostEntries(hosts.keys, in: table, proxy: proxy)
            if entries == nil { error(["hosts"], "hosts: TOMLKit lists a key it cannot look up") }
        }
        for (again, first) in hosts.duplicates {
            let (key, earlier) = (hosts.keys[again].key, hosts.keys[first])
            error(["hosts", key], "\(Self.display(["hosts", key])) is the same pattern as \(Self.display(["hosts", earlier.key])) (line \(earlier.line)) once normalised")
        }
        return (entries ?? [], hosts.positions)
    }

    /// Parses the entries named by `keys` on every core, in file-ordered chunks with a loader
    /// each, and merges them back in order with their diagnostics; nil (and nothing reported)
    /// when a key is not in `table`.
    mutating func parseHostEntries(_ keys: [HostKeys.Key], in table: TOMLTable, proxy: ProxySettings) -> [PolicyEntry]? {
        let chunkCount = min(ProcessInfo.processInfo.activeProcessorCount, max(1, keys.count / Self.entriesPerChunk))
        var template = self
        template.errors = []
        template.warnings = []
        let shared = UncheckedSendable(value: (template: template, keys: keys, table: table))
        let results = ChunkResults(count: chunkCount)
        DispatchQueue.concurrentPerform(iterations: chunkCount) { chunk in
            let all = shared.value.keys
            var loader = shared.value.template
            let entries = loader.parseHostChunk(all[(all.count * chunk / chunkCount)..<(all.count * (chunk + 1) / chunkCount)],
                                                in: shared.value.table, proxy: proxy)
            results.store(chunk, entries.map { ChunkResults.Slot(entries: $0, errors: loader.errors, warnings: loader.warnings) })
        }
        guard let slots = results.complete else { return nil }
        var entries: [PolicyEntry] = []
        entries.reserveCapacity(keys.count)
        for slot in slots {
            entries += slot.entries
            errors += slot.errors
            warnings += slot.warnings
        }
        return entries
    }

    /// Below this many entries a second core is not worth starting.
    static let entriesPerChunk = 2_000

    /// Parses the `[hosts."…"]` tables named by `keys`, in order, and returns those without
    /// errors; nil when a key is not in `table`.
    mutating func parseHostChunk(_ keys: ArraySlice<HostKeys.Key>, in table: TOMLTable, proxy: ProxySettings) -> [PolicyEntry]? {
        var entries: [PolicyEntry] = []
        entries.reserveCapacity(keys.count)
        for host in keys {
            guard let value = table[host.key] else { return nil }
            let keyPath = ["hosts", host.key]
            let name = Self.display(keyPath)
            guard let entryTable = value.table else {
                typeError(keyPath, value, expected: "a table such as [hosts.\"\(host.key)\"]")
                continue
            }
            guard let pattern = host.pattern else {
                error(keyPath, "\(name): invalid host pattern: use a DNS name in LDH ASCII (xn-- form for internationalised names), \"*.\" followed by a name, or an IP literal")
                continue
            }
            if let policy = parsePolicy(entryTable, keyPath, name: name, pattern: pattern, proxy: proxy) {
                entries.append(PolicyEntry(pattern: pattern, name: name, line: host.line, policy: policy))
            }
        }
        return entries
    }

    // MARK: A policy entry

    /// Parses the policy of the table at `entryPath`, shown as `name` in diagnostics.
    mutating func parsePolicy(_ table: TOMLTable, _ entryPath: [String], name: String, pattern: HostPattern?, proxy: ProxySettings) -> HostPolicy? {
        let errorsBefore = errors.count
        var policy = HostPolicy(trust: .none, ports: proxy.allowPorts)
        var trustWord = "system"
        var trustFiles: [String]?
        var pinTexts: [String] = []
        var parsedPins: [Pin] = []
        var certificateFiles: [String] = []
        var crlFiles: [String]?

        // Keys are looked up by name until every key of the table is found: TOMLKit copies
        // the keys of a table it iterates into memory it never frees, and a daemon reloads.
        // Only a table with an unknown key is iterated, to name it.
        let keyCount = table.count
        var found = 0
        for key in Self.policyKeys where found < keyCount {
            guard let value = table[key] else { continue }
            found += 1
            var keyPath: [String] { entryPath + [key] }
            switch key {
            case "action":
                if let action = choice(value, keyPath, HostPolicy.Action.self) { policy.action = action }
            case "trust":
                if let word = value.string {
                    if ["system", "pinned", "none"].contains(word) { trustWord = word } else {
                        error(keyPath, "\(Self.display(keyPath)) = \"\(word)\" is not \"system\", \"pinned\", \"none\" or a list of certificate files")
                    }
                } else if value.array != nil {
                    if let files = strings(value, keyPath, allowEmpty: false) { trustFiles = files; trustWord = "list" }
                } else {
                    typeError(keyPath, value, expected: "\"system\", \"pinned\", \"none\" or an array of certificate files")
                }
            case "validate_host":
                if let flag = bool(value, keyPath) { policy.validateHost = flag }
            case "pin":
                if let kind = choice(value, keyPath, HostPolicy.PinKind.self) { policy.pinKind = kind }
            case "pins":
                guard let texts = strings(value, keyPath) else { continue }
                for text in texts {
                    if let pin = Pin(text) {
                        parsedPins.append(pin)
                        continue
                    }
                    error(keyPath, element: text, "malformed pin \"\(text)\": a pin is \"sha256/\" followed by the 44-character padded base64 of a 32-byte SHA-256 digest (see `pinproxy pin FILE`)")
                }
                pinTexts = texts
            case "certificates":
                if let files = strings(value, keyPath) { certificateFiles = files }
            case "enforce":
                if let flag = bool(value, keyPath) { policy.enforce = flag }
            case "expires":
                guard let date = value.date else {
                    typeError(keyPath, value, expected: "a date such as 2027-01-31")
                    continue
                }
                policy.expires = String(format: "%04d-%02d-%02d", date.year, date.month, date.day)
                var components = DateComponents()
                (components.year, components.month, components.day) = (date.year, date.month, date.day + 1)
                var calendar = Calendar(identifier: .gregorian)
                calendar.timeZone = TimeZone(identifier: "UTC")!
                policy.pinsExpireAt = calendar.date(from: components)
            case "include_subdomains":
                if let flag = bool(value, keyPath) { policy.includeSubdomains = flag }
            case "ports":
                if let ports = ports(value, keyPath) { policy.ports = ports }
            case "min_tls":
                if let version = choice(value, keyPath, HostPolicy.TLSVersion.self) { policy.minTLS = version }
            case "mode":
                guard let mode = string(value, keyPath) else { continue }
                if mode == "tunnel" {
                    error(keyPath, "\(Self.display(keyPath)) = \"tunnel\" is not implemented yet: pinproxy only intercepts; remove the key or set mode = \"intercept\"")
                } else if mode != "intercept" {
                    error(keyPath, "\(Self.display(keyPath)) = \"\(mode)\" is not \"intercept\"")
                }
            case "revocation":
                if let text = string(value, keyPath) {
                    switch text {
                    case "off": policy.revocation = .off
                    case "crl": policy.revocation = .crl([])
                    case "ocsp-staple": policy.revocation = .ocspStaple
                    default: error(keyPath, "\(Self.display(keyPath)) = \"\(text)\" is not one of \"off\", \"crl\", \"ocsp-staple\"")
                    }
                }
            case "crls":
                if let files = strings(value, keyPath) { crlFiles = files }
            default:
                preconditionFailure("policy key \(key) has no reader")
            }
        }
        if found < keyCount {
            for key in table.keys where !Self.policyKeys.contains(key) {
                unknownKey(entryPath + [key], known: Self.policyKeys)
            }
        }
        guard errors.count == errorsBefore else { return nil }

        // Combinations, reported at the entry's header.
        let hasPinMaterial = !pinTexts.isEmpty || !certificateFiles.isEmpty
        if pattern == nil && policy.includeSubdomains {
            error(entryPath + ["include_subdomains"], "include_subdomains has no meaning in [default]")
        }
        if policy.includeSubdomains, let pattern, case .exact = pattern {} else if policy.includeSubdomains, pattern != nil {
            error(entryPath + ["include_subdomains"], "\(name): include_subdomains applies to exact names only, not to \"*.\" patterns or IP literals")
        }
        if policy.pinKind == .none && hasPinMaterial {
            let given = !pinTexts.isEmpty ? "pins" : "certificates"
            error(entryPath, "\(name) gives \(given) but pin = \"none\": set pin = \"public-key\" or pin = \"certificate\" (or remove \(given))")
        }
        if policy.pinKind != .none && !hasPinMaterial {
            error(entryPath, "\(name) has pin = \"\(policy.pinKind.rawValue)\" but no pins and no certificates")
        }
        if trustWord == "none" && !(policy.pinKind != .none && hasPinMaterial) {
            error(entryPath, "\(name) has trust = \"none\" without pins: it would accept any certificate; add pin and pins (or certificates)")
        }
        if !policy.validateHost && !(policy.pinKind != .none && hasPinMaterial) {
            error(entryPath, "\(name) has validate_host = false without pins: it would accept a certificate for any name; add pin and pins (or certificates)")
        }
        if trustWord == "pinned" && certificateFiles.isEmpty {
            error(entryPath, "\(name) has trust = \"pinned\" but no certificates: a hash alone cannot be an anchor; list the certificates")
        }
        if policy.expires != nil {
            if policy.pinKind == .none {
                error(entryPath + ["expires"], "\(name): expires needs pins to expire")
            } else if trustWord == "pinned" || trustWord == "none" || !policy.validateHost {
                error(entryPath + ["expires"], "\(name): expires is allowed only where the chain and the host are verified (trust = \"system\" or a list, validate_host = true): here the pins are the only protection")
            }
        }
        let wantsCRL: Bool = if case .crl = policy.revocation { true } else { false }
        if wantsCRL && (crlFiles ?? []).isEmpty {
            error(entryPath, "\(name) has revocation = \"crl\" but no crls")
        }
        if !wantsCRL && crlFiles != nil {
            error(entryPath + ["crls"], "\(name) gives crls but revocation is not \"crl\"")
        }
        if trustWord == "none", case .off = policy.revocation {} else if trustWord == "none" {
            error(entryPath + ["revocation"], "\(name): revocation needs a verified chain, and trust = \"none\" verifies none")
        }
        guard errors.count == errorsBefore else { return nil }

        // Files.
        let pinned = certificates(certificateFiles, entryPath + ["certificates"], what: "pinned certificate") ?? []
        policy.pinnedCertificates = pinned
        if let crlFiles, wantsCRL, let lists = revocationLists(crlFiles, entryPath + ["crls"]) {
            policy.revocation = .crl(lists)
        }
        var anchors: [Certificate] = []
        switch trustWord {
        case "system":
            if let store = system(entryPath) { policy.trust = .system(store) }
        case "pinned":
            anchors = pinned
        case "list":
            anchors = certificates(trustFiles ?? [], entryPath + ["trust"], what: "anchor") ?? []
        default:
            policy.trust = .none
        }
        guard errors.count == errorsBefore else { return nil }
        if trustWord == "pinned" || trustWord == "list" {
            do {
                let store = try TrustStore(anchors: anchors)
                policy.trust = trustWord == "pinned" ? .pinned(store) : .anchors(store, anchors)
            } catch {
                self.error(entryPath + ["trust"], "\(name): cannot build the trust store: \(error)")
                return nil
            }
        }

        var digests = parsedPins
        for certificate in pinned {
            digests.append(Pin(digest: policy.pinKind == .certificate ? certificate.certificateSHA256 : certificate.publicKeySHA256))
        }
        var unique: [Pin] = []
        for pin in digests where !unique.contains(pin) { unique.append(pin) }
        policy.pins = unique

        addWarnings(policy, entryPath, name: name, anchors: anchors)
        return policy
    }

    mutating func addWarnings(_ policy: HostPolicy, _ entryPath: [String], name: String, anchors: [Certificate]) {
        if policy.action == .allowInsecure {
            warn(entryPath + ["action"], "\(name) has action = \"allow-insecure\": its connections are not checked at all")
        }
        if policy.pinKind != .none && policy.pins.count == 1 {
            warn(entryPath, "\(name) has a single pin and no backup: add the pin of a backup key so that a key change does not lock clients out")
        }
        if let expiry = policy.pinsExpireAt, let written = policy.expires {
            if expiry <= now {
                warn(entryPath + ["expires"], "\(name): expires = \(written) has passed: its pins are no longer enforced")
            } else if expiry.timeIntervalSince(now) <= Self.warningWindow {
                warn(entryPath + ["expires"], "\(name): expires = \(written) is within 30 days: its pins stop being enforced then")
            }
        }
        let checked: [(Certificate, [String], String)] = policy.pinnedCertificates.map { ($0, entryPath + ["certificates"], "pinned certificate") }
            + anchors.filter { !policy.pinnedCertificates.contains($0) }.map { ($0, entryPath + ["trust"], "anchor") }
        for (certificate, keyPath, what) in checked {
            let notAfter = certificate.notAfter
            if notAfter <= now {
                warn(keyPath, "\(name): \(what) \(certificate.subject) expired on \(rfc3339(notAfter))")
            } else if notAfter.timeIntervalSince(now) <= Self.warningWindow {
                warn(keyPath, "\(name): \(what) \(certificate.subject) expires on \(rfc3339(notAfter)), within 30 days")
            }
        }
    }
}

/// A value computed on another thread while the caller goes on.
private final class InBackground<Value>: @unchecked Sendable {
    private var value: Value?
    private let done = DispatchGroup()

    init(_ work: @escaping @Sendable () -> Value) {
        done.enter()
        DispatchQueue.global().async { [self] in
            value = work()
            done.leave()
        }
    }

    /// Waits for the value.
    func result() -> Value {
        done.wait()
        return value!
    }
}

/// Hands values that are only read, or owned by one task at a time, to other threads.
private struct UncheckedSendable<Value>: @unchecked Sendable {
    let value: Value
}

/// One slot per chunk, each written by its own task.
private final class ChunkResults: @unchecked Sendable {
    struct Slot {
        let entries: [PolicyEntry]
        let errors: [Diagnostic]
        let warnings: [Diagnostic]
    }

    private let lock = NSLock()
    /// nil inside: the chunk found a key missing from the table.
    private var slots: [Slot??]

    init(count: Int) {
        slots = Array(repeating: nil, count: count)
    }

    func store(_ chunk: Int, _ slot: Slot?) {
        lock.lock()
        slots[chunk] = .some(slot)
        lock.unlock()
    }

    /// The slots in chunk order; nil when a chunk found a key missing.
    var complete: [Slot]? {
        lock.lock()
        defer { lock.unlock() }
        var result: [Slot] = []
        for slot in slots {
            guard case .some(.some(let filled)) = slot else { return nil }
            result.append(filled)
        }
        return result
    }
}

/// "an integer", "a string".
private func withArticle(_ type: TOMLType) -> String {
    let name = "\(type)"
    return ("aeiou".contains(name.first ?? "x") ? "an " : "a ") + name
}

/// Levenshtein distance, for "did you mean" hints on unknown keys.
private func editDistance(_ a: String, _ b: String) -> Int {
    let a = Array(a), b = Array(b)
    var previous = Array(0...b.count)
    for i in 1...max(a.count, 1) where !a.isEmpty {
        var current = [i] + Array(repeating: 0, count: b.count)
        for j in 1...max(b.count, 1) where !b.isEmpty {
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
        }
        previous = current
    }
    return previous[b.count]
}
