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
        // The line index is built on another core while TOMLKit parses.
        let indexing = IndexInBackground(text)
        let document: TOMLTable
        do {
            document = try TOMLTable(string: text)
        } catch let error as TOMLParseError {
            throw ConfigError(diagnostics: [Diagnostic(file: path, line: max(1, error.source.begin.line), severity: .error,
                                                       message: "TOML syntax: \(error.description)")])
        } catch {
            throw ConfigError(diagnostics: [Diagnostic(file: path, line: 1, severity: .error, message: "TOML syntax: \(error)")])
        }
        var loader = Loader(path: path, directory: directory, now: now, index: indexing.result())
        let config = loader.load(document)
        guard let config, loader.errors.isEmpty else {
            throw ConfigError(diagnostics: loader.errors.sorted { $0.line < $1.line })
        }
        return config
    }
}

/// One load: collects every error and warning instead of stopping at the first.
private struct Loader {
    let path: String
    let directory: String
    let now: Date
    let index: SourceIndex
    var errors: [Diagnostic] = []
    var warnings: [Diagnostic] = []
    private var certificateFiles: [String: [Certificate]] = [:]
    private var systemStore: TrustStore?

    static let topLevelKeys = ["proxy", "resolve", "default", "hosts"]
    static let proxyKeys = ["listen", "ca_dir", "allow_ports", "block_private_destinations", "metrics_listen",
                            "log_format", "workers", "request_timeout", "dns_timeout", "connect_timeout",
                            "handshake_timeout", "idle_timeout", "drain_timeout", "max_connections",
                            "relay_buffer_bytes"]
    static let policyKeys = ["action", "trust", "validate_host", "pin", "pins", "certificates", "enforce", "expires",
                             "include_subdomains", "ports", "min_tls", "mode", "revocation", "crls"]
    static let certificateExtensions: Set<String> = ["pem", "crt", "cer", "der"]
    static let warningWindow: TimeInterval = 30 * 86_400

    init(path: String, directory: String, now: Date, index: SourceIndex) {
        self.path = path
        self.directory = directory
        self.now = now
        self.index = index
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
        keyPath.map { key in
            !key.isEmpty && key.utf8.allSatisfy(SourceIndex.isBareKeyByte) ? key : "\"\(key)\""
        }.joined(separator: ".")
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

    mutating func string(_ value: TOMLValueConvertible, _ keyPath: [String]) -> String? {
        if let string = value.string { return string }
        typeError(keyPath, value, expected: "a string")
        return nil
    }

    mutating func bool(_ value: TOMLValueConvertible, _ keyPath: [String]) -> Bool? {
        if let bool = value.bool { return bool }
        typeError(keyPath, value, expected: "true or false")
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

    mutating func strings(_ value: TOMLValueConvertible, _ keyPath: [String], allowEmpty: Bool = true) -> [String]? {
        guard let array = value.array else {
            typeError(keyPath, value, expected: "an array of strings")
            return nil
        }
        var result: [String] = []
        for element in array {
            guard let string = element.string else {
                error(keyPath, "\(Self.display(keyPath)) must be an array of strings, and holds \(withArticle(element.type))")
                return nil
            }
            result.append(string)
        }
        if !allowEmpty && result.isEmpty {
            error(keyPath, "\(Self.display(keyPath)) must not be empty")
            return nil
        }
        return result
    }

    mutating func choice<T: RawRepresentable & CaseIterable>(_ value: TOMLValueConvertible, _ keyPath: [String], _ type: T.Type) -> T? where T.RawValue == String {
        guard let text = string(value, keyPath) else { return nil }
        if let parsed = T(rawValue: text) { return parsed }
        let allowed = T.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")
        error(keyPath, "\(Self.display(keyPath)) = \"\(text)\" is not one of \(allowed)")
        return nil
    }

    mutating func ports(_ value: TOMLValueConvertible, _ keyPath: [String]) -> Set<UInt16>? {
        guard let array = value.array, !array.isEmpty else {
            if value.array == nil { typeError(keyPath, value, expected: "an array of port numbers") } else {
                error(keyPath, "\(Self.display(keyPath)) must not be empty")
            }
            return nil
        }
        var result: Set<UInt16> = []
        for element in array {
            guard let port = element.int, (1...65_535).contains(port) else {
                error(keyPath, "\(Self.display(keyPath)) must hold port numbers from 1 to 65535, and holds \(element.debugDescription)")
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
    mutating func certificates(_ files: [String], _ keyPath: [String], what: String) -> [Certificate]? {
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
                error(keyPath, element: file, "\(what) \"\(file)\" does not exist (\(resolved))")
                failed = true
                continue
            }
            var loaded: [Certificate] = []
            if isDirectory.boolValue {
                let names = (try? FileManager.default.contentsOfDirectory(atPath: resolved)) ?? []
                let certificateNames = names.filter { Self.certificateExtensions.contains(($0 as NSString).pathExtension.lowercased()) }.sorted()
                if certificateNames.isEmpty {
                    error(keyPath, element: file, "\(what) directory \"\(file)\" holds no .pem, .crt, .cer or .der file")
                    failed = true
                    continue
                }
                for name in certificateNames {
                    guard let parsed = certificateFile(resolved + "/" + name, shownAs: file + "/" + name, keyPath, element: file, what: what) else {
                        failed = true
                        continue
                    }
                    loaded += parsed
                }
            } else {
                guard let parsed = certificateFile(resolved, shownAs: file, keyPath, element: file, what: what) else {
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

    mutating func certificateFile(_ resolved: String, shownAs file: String, _ keyPath: [String], element: String, what: String) -> [Certificate]? {
        guard let data = FileManager.default.contents(atPath: resolved) else {
            error(keyPath, element: element, "\(what) \"\(file)\" cannot be read")
            return nil
        }
        do {
            return try Certificate.parseAll(Array(data))
        } catch {
            self.error(keyPath, element: element, "\(what) \"\(file)\" holds no PEM or DER certificate")
            return nil
        }
    }

    mutating func revocationLists(_ files: [String], _ keyPath: [String]) -> [RevocationList]? {
        var result: [RevocationList] = []
        var failed = false
        for file in files {
            let resolved = resolve(file)
            guard let data = FileManager.default.contents(atPath: resolved) else {
                let why = FileManager.default.fileExists(atPath: resolved) ? "cannot be read" : "does not exist (\(resolved))"
                error(keyPath, element: file, "CRL file \"\(file)\" \(why)")
                failed = true
                continue
            }
            do {
                result += try RevocationList.parseAll(Array(data))
            } catch {
                self.error(keyPath, element: file, "CRL file \"\(file)\" holds no PEM or DER CRL")
                failed = true
            }
        }
        return failed ? nil : result
    }

    mutating func system(_ keyPath: [String]) -> TrustStore? {
        if let systemStore { return systemStore }
        do {
            systemStore = try TrustStore.system()
        } catch {
            self.error(keyPath, "cannot load the system trust store: \(error)")
        }
        return systemStore
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
                if let policy = parsePolicy(table, ["default"], pattern: nil, proxy: proxy) {
                    defaultEntry = PolicyEntry(pattern: nil, name: "default", line: index.line(of: ["default"]), policy: policy)
                }
            } else {
                typeError(["default"], value, expected: "a table")
            }
        } else if let store = system(["default"]) {
            defaultEntry = PolicyEntry(pattern: nil, name: "default", line: 0,
                                       policy: HostPolicy(trust: .system(store), ports: proxy.allowPorts))
        }

        var entries: [PolicyEntry] = []
        if let value = document["hosts"] {
            if let table = value.table { entries = parseHosts(table, proxy: proxy) } else { typeError(["hosts"], value, expected: "a table") }
        }

        guard errors.isEmpty, let defaultEntry else { return nil }
        return Config(path: path, proxy: proxy, resolve: resolve,
                      policies: PolicyTable(defaultEntry: defaultEntry, entries: entries),
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

    /// Host entries, in file order. Each entry is parsed on its own (on every core, in
    /// file-ordered chunks, merged back in order with its diagnostics); then duplicates are
    /// settled in file order, reported where the pattern is written the second time.
    mutating func parseHosts(_ table: TOMLTable, proxy: ProxySettings) -> [PolicyEntry] {
        let keys = table.keys.map { ($0, index.line(of: ["hosts", $0])) }.sorted { ($0.1, $0.0) < ($1.1, $1.0) }
        let chunkCount = min(ProcessInfo.processInfo.activeProcessorCount, max(1, keys.count / Self.entriesPerChunk))
        var parsed: [ParsedHost] = []
        if chunkCount <= 1 {
            parsed = parseHostEntries(keys[...], in: table, proxy: proxy)
        } else {
            // Each chunk gets its own loader: it shares the source index and starts with no diagnostics.
            var template = self
            template.errors = []
            template.warnings = []
            let shared = UncheckedSendable(value: (template: template, keys: keys, table: table))
            let results = ChunkResults(count: chunkCount)
            DispatchQueue.concurrentPerform(iterations: chunkCount) { chunk in
                let all = shared.value.keys
                var loader = shared.value.template
                let hosts = loader.parseHostEntries(all[(all.count * chunk / chunkCount)..<(all.count * (chunk + 1) / chunkCount)],
                                                    in: shared.value.table, proxy: proxy)
                results.store(chunk, ChunkResults.Slot(hosts: hosts, errors: loader.errors, warnings: loader.warnings))
            }
            parsed.reserveCapacity(keys.count)
            for slot in results.all {
                parsed += slot.hosts
                errors += slot.errors
                warnings += slot.warnings
            }
        }

        var entries: [PolicyEntry] = []
        var seen: [HostPattern: String] = [:]  // pattern -> the key that first wrote it
        entries.reserveCapacity(parsed.count)
        seen.reserveCapacity(parsed.count)
        for host in parsed {
            if let first = seen[host.pattern] {
                error(["hosts", host.key], "\(host.name) is the same pattern as \(Self.display(["hosts", first])) (line \(index.line(of: ["hosts", first]))) once normalised")
                continue
            }
            seen[host.pattern] = host.key
            if let entry = host.entry { entries.append(entry) }
        }
        return entries
    }

    /// Below this many entries a second core is not worth starting.
    static let entriesPerChunk = 2_000

    /// Parses the `[hosts."…"]` tables named by `keys`, in order; a table whose pattern is
    /// invalid is reported and left out.
    mutating func parseHostEntries(_ keys: ArraySlice<(String, Int)>, in table: TOMLTable, proxy: ProxySettings) -> [ParsedHost] {
        var hosts: [ParsedHost] = []
        hosts.reserveCapacity(keys.count)
        for (key, line) in keys {
            guard let value = table[key] else { continue }
            let keyPath = ["hosts", key]
            let name = Self.display(keyPath)
            guard let entryTable = value.table else {
                typeError(keyPath, value, expected: "a table such as [hosts.\"\(key)\"]")
                continue
            }
            guard let pattern = HostPattern(key) else {
                error(keyPath, "\(name): invalid host pattern: use a DNS name in LDH ASCII (xn-- form for internationalised names), \"*.\" followed by a name, or an IP literal")
                continue
            }
            let entry = parsePolicy(entryTable, keyPath, pattern: pattern, proxy: proxy).map {
                PolicyEntry(pattern: pattern, name: name, line: line, policy: $0)
            }
            hosts.append(ParsedHost(key: key, pattern: pattern, name: name, entry: entry))
        }
        return hosts
    }

    // MARK: A policy entry

    mutating func parsePolicy(_ table: TOMLTable, _ entryPath: [String], pattern: HostPattern?, proxy: ProxySettings) -> HostPolicy? {
        let errorsBefore = errors.count
        let name = Self.display(entryPath)
        var policy = HostPolicy(trust: .none, ports: proxy.allowPorts)
        var trustWord = "system"
        var trustFiles: [String]?
        var pinTexts: [String] = []
        var parsedPins: [Pin] = []
        var certificateFiles: [String] = []
        var crlFiles: [String]?

        for (key, value) in table {
            let keyPath = entryPath + [key]
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
                unknownKey(keyPath, known: Self.policyKeys)
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

/// Builds a `SourceIndex` on a background thread.
private final class IndexInBackground: @unchecked Sendable {
    private var index: SourceIndex?
    private let done = DispatchGroup()

    init(_ text: String) {
        done.enter()
        DispatchQueue.global().async { [self] in
            index = SourceIndex(text)
            done.leave()
        }
    }

    /// Waits for the index.
    func result() -> SourceIndex {
        done.wait()
        return index!
    }
}

/// One `[hosts."PATTERN"]` entry as parsed, before duplicates are settled.
private struct ParsedHost {
    let key: String
    let pattern: HostPattern
    let name: String
    /// nil when the entry has errors (reported already).
    let entry: PolicyEntry?
}

/// Hands values that are only read (or owned by one task) across `concurrentPerform`.
private struct UncheckedSendable<Value>: @unchecked Sendable {
    let value: Value
}

/// One slot per chunk, each written by its own task.
private final class ChunkResults: @unchecked Sendable {
    struct Slot {
        let hosts: [ParsedHost]
        let errors: [Diagnostic]
        let warnings: [Diagnostic]
    }

    private let lock = NSLock()
    private var slots: [Slot?]

    init(count: Int) {
        slots = Array(repeating: nil, count: count)
    }

    func store(_ chunk: Int, _ slot: Slot) {
        lock.lock()
        slots[chunk] = slot
        lock.unlock()
    }

    /// The slots in chunk order.
    var all: [Slot] {
        lock.lock()
        defer { lock.unlock() }
        return slots.compactMap { $0 }
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
