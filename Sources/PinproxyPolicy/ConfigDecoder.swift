import Foundation
import PinproxyInterop
import TOMLKit

/// The first stage of loading: a parsed TOML document into Swift values — `[proxy]` and
/// `[resolve]` settings, and each policy table as a `RawPolicy` with the key paths it was
/// written at. Unknown keys, wrong types, words that are not one of the choices and malformed
/// pins are reported here; no file is read and no rule across keys is checked.
///
/// TOMLKit 0.6 leaks: every table it iterates copies its keys into memory it never frees, and a
/// document is never freed. Keys are therefore looked up by name (a table is iterated only to
/// name an unknown key), and `release(_:)` frees each document once loaded.
struct ConfigDecoder {
    private(set) var findings: [Finding] = []

    static let topLevelKeys = ["proxy", "resolve", "capture", "default", "hosts", "clients"]
    static let proxyKeys = ["listen", "ca_dir", "allow_ports", "block_private_destinations", "metrics_listen",
                            "transparent_listen",
                            "log_format", "workers", "request_timeout", "dns_timeout", "connect_timeout",
                            "handshake_timeout", "idle_timeout", "drain_timeout", "max_connections",
                            "relay_buffer_bytes", "admin_timeout", "refusal", "pid_file", "report_to",
                            "report_rate_limit", "report_file_max_bytes",
                            "verify_command_timeout", "verify_command_cache", "verify_command_concurrency",
                            "client_identity_timeout", "report_client_identity"]
    static let policyKeys = ["action", "trust", "validate_host", "pin", "pins", "certificates", "enforce", "expires",
                             "include_subdomains", "ports", "min_tls", "mode", "revocation", "crls",
                             "require_web_pki_profile", "verify_command", "client_certificate", "client_key"]

    /// Whether `key` takes a value of `type`: of keys equally close to an unknown one, the
    /// value's type picks (`pinz = [...]` is `pins`, `pinz = "public-key"` is `pin`).
    static func key(_ key: String, takes type: TOMLType) -> Bool {
        switch key {
        case "proxy", "resolve", "default", "hosts":
            return type == .table
        case "request_timeout", "dns_timeout", "connect_timeout", "handshake_timeout", "idle_timeout", "drain_timeout",
             "admin_timeout", "verify_command_timeout":
            return type == .int || type == .double
        case "workers", "max_connections", "relay_buffer_bytes", "verify_command_cache", "verify_command_concurrency":
            return type == .int
        case "listen", "allow_ports", "report_to", "pins", "certificates", "ports", "crls", "verify_command":
            return type == .array
        case "block_private_destinations", "validate_host", "enforce", "include_subdomains", "require_web_pki_profile":
            return type == .bool
        case "trust":
            return type == .string || type == .array
        case "expires":
            return type == .date
        default:
            return type == .string
        }
    }

    /// Parses `text` with TOMLKit; a syntax error becomes a diagnostic of `path`.
    static func parse(_ text: String, path: String) -> Result<TOMLTable, ConfigError> {
        do {
            return .success(try TOMLTable(string: text))
        } catch let error as TOMLParseError {
            return .failure(ConfigError(diagnostics: [Diagnostic(file: path, line: max(1, error.source.begin.line), severity: .error,
                                                                 message: "TOML syntax: \(error.description)")]))
        } catch {
            return .failure(ConfigError(diagnostics: [Diagnostic(file: path, line: 1, severity: .error, message: "TOML syntax: \(error)")]))
        }
    }

    /// Frees a parsed document's nodes on another core (freeing 100,000 entries takes as long
    /// as parsing them). Nothing may use a TOMLKit value from it afterwards.
    static func release(_ document: TOMLTable) {
        let parsed = UncheckedSendable(value: document)
        DispatchQueue.global(qos: .utility).async { parsed.value.clear() }
    }

    // MARK: The document

    static let captureKeys = ["ports", "local", "block_quic", "exempt_users"]

    /// The top-level tables: unknown ones reported, `[proxy]`, `[resolve]` and `[capture]` decoded.
    mutating func decodeTopLevel(_ document: TOMLTable) -> (proxy: ProxySettings, resolve: [String: [IPAddress]], capture: CaptureSettings) {
        for key in document.keys where !Self.topLevelKeys.contains(key) {
            unknownKey([key], document[key], known: Self.topLevelKeys)
        }
        var proxy = ProxySettings()
        if let value = document["proxy"] {
            if let table = value.table { decodeProxy(table, into: &proxy) } else { typeError(["proxy"], value, expected: "a table") }
        }
        var resolve: [String: [IPAddress]] = [:]
        if let value = document["resolve"] {
            if let table = value.table { resolve = decodeResolve(table) } else { typeError(["resolve"], value, expected: "a table") }
        }
        var capture = CaptureSettings()
        if let value = document["capture"] {
            if let table = value.table { decodeCapture(table, into: &capture) } else { typeError(["capture"], value, expected: "a table") }
        }
        return (proxy, resolve, capture)
    }

    /// The table under `key` (`default`, `hosts`), if written; a type error if it is not a table.
    mutating func table(_ key: String, in document: TOMLTable) -> TOMLTable? {
        guard let value = document[key] else { return nil }
        guard let table = value.table else {
            typeError([key], value, expected: "a table")
            return nil
        }
        return table
    }

    mutating func decodeProxy(_ table: TOMLTable, into proxy: inout ProxySettings) {
        for (key, value) in table {
            let keyPath = ["proxy", key]
            switch key {
            case "listen":
                if let addresses = listenAddresses(value, keyPath, allowEmpty: false) { proxy.listen = addresses }
            case "transparent_listen":
                if let addresses = listenAddresses(value, keyPath, allowEmpty: true) { proxy.transparentListen = addresses }
            case "ca_dir":
                if let text = string(value, keyPath) {
                    if text.isEmpty { error(keyPath, "proxy.ca_dir must not be empty") } else { proxy.caDirectory = text }
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
            case "pid_file":
                if let text = string(value, keyPath) {
                    if text.isEmpty { error(keyPath, "proxy.pid_file must not be empty") } else { proxy.pidFile = text }
                }
            case "refusal":
                if let delivery = choice(value, keyPath, ProxySettings.RefusalDelivery.self) { proxy.refusal = delivery }
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
            case "admin_timeout":
                if let seconds = seconds(value, keyPath) { proxy.adminTimeout = seconds }
            case "report_to":
                guard let texts = strings(value, keyPath) else { continue }
                var destinations: [ReportDestination] = []
                for text in texts {
                    if let destination = ReportDestination(text, relativeTo: "") { destinations.append(destination) } else {
                        error(keyPath, element: text, "proxy.report_to: \"\(text)\" is neither \"file:PATH\" nor an https:// URL")
                    }
                }
                proxy.reportTo = destinations
            case "report_rate_limit":
                if let count = integer(value, keyPath, in: 1...Int.max) { proxy.reportRateLimit = count }
            case "report_file_max_bytes":
                if let count = integer(value, keyPath, in: 1...Int.max) { proxy.reportFileMaxBytes = count }
            case "verify_command_timeout":
                if let seconds = seconds(value, keyPath) { proxy.verifyCommandTimeout = seconds }
            case "verify_command_cache":
                if let count = integer(value, keyPath, in: 0...86_400) { proxy.verifyCommandCache = TimeInterval(count) }
            case "verify_command_concurrency":
                if let count = integer(value, keyPath, in: 1...64) { proxy.verifyCommandConcurrency = count }
            case "client_identity_timeout":
                if let seconds = seconds(value, keyPath) { proxy.clientIdentityTimeout = seconds }
            case "report_client_identity":
                if let flag = bool(value, keyPath) { proxy.reportClientIdentity = flag }
            default:
                unknownKey(keyPath, value, known: Self.proxyKeys)
            }
        }
    }

    /// `[capture]`: the egress lock's settings.
    mutating func decodeCapture(_ table: TOMLTable, into capture: inout CaptureSettings) {
        capture.isWritten = true
        for (key, value) in table {
            let keyPath = ["capture", key]
            switch key {
            case "ports":
                // Empty is allowed: nothing is captured.
                if value.array?.isEmpty == true { capture.ports = [] } else if let ports = ports(value, keyPath) { capture.ports = ports.sorted() }
            case "local":
                if let flag = bool(value, keyPath) { capture.local = flag }
            case "block_quic":
                if let flag = bool(value, keyPath) { capture.blockQUIC = flag }
            case "exempt_users":
                guard let names = strings(value, keyPath) else { continue }
                for name in names where !Self.isUserName(name) {
                    error(keyPath, element: name, "capture.exempt_users: \"\(name)\" is not a user name (letters, digits, \"_\", \"-\" and \".\", not starting with \"-\")")
                }
                capture.exemptUsers = names
            default:
                unknownKey(keyPath, value, known: Self.captureKeys)
            }
        }
    }

    /// A user name `useradd` accepts: at most 32 letters, digits, `_`, `-`, `.` (and a final `$`),
    /// not starting with `-` and not all digits (nftables would read that as a uid).
    static func isUserName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard !bytes.isEmpty, bytes.count <= 32, bytes[0] != UInt8(ascii: "-"),
              !bytes.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else { return false }
        return bytes.enumerated().allSatisfy { index, byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: "."):
                return true
            case UInt8(ascii: "$"):
                return index == bytes.count - 1
            default:
                return false
            }
        }
    }

    /// An array of `IP:PORT` listen addresses (`proxy.listen`, `proxy.transparent_listen`).
    mutating func listenAddresses(_ value: TOMLValueConvertible, _ keyPath: [String], allowEmpty: Bool) -> [ListenAddress]? {
        guard let texts = strings(value, keyPath, allowEmpty: allowEmpty) else { return nil }
        var addresses: [ListenAddress] = []
        for text in texts {
            guard let address = ListenAddress(text) else {
                error(keyPath, element: text, "\(displayKeyPath(keyPath)): \"\(text)\" is not IP:PORT (for example \"127.0.0.1:3128\" or \"[::1]:3128\")")
                continue
            }
            addresses.append(address)
        }
        return addresses
    }

    mutating func decodeResolve(_ table: TOMLTable) -> [String: [IPAddress]] {
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

    // MARK: A policy table

    /// The policy table `table` written at `path`, and whether every key of it decoded (a key
    /// that did not keeps its default).
    mutating func decodePolicy(_ table: TOMLTable, _ path: [String], name: String, pattern: HostPattern?) -> (policy: RawPolicy, decoded: Bool) {
        let findingsBefore = findings.count
        var policy = RawPolicy(path: path, name: name, pattern: pattern)
        let keyCount = table.count
        var found = 0
        for key in Self.policyKeys where found < keyCount {
            guard let value = table[key] else { continue }
            found += 1
            var keyPath: [String] { path + [key] }
            switch key {
            case "action":
                if let action = choice(value, keyPath, HostPolicy.Action.self) { policy.action = action }
            case "trust":
                if let word = value.string {
                    switch word {
                    case "system": policy.trust = .system
                    case "pinned": policy.trust = .pinned
                    case "none": policy.trust = .none
                    default: error(keyPath, "\(displayKeyPath(keyPath)) = \"\(word)\" is not \"system\", \"pinned\", \"none\" or a list of certificate files")
                    }
                } else if value.array != nil {
                    // "system" in the list: the OS store as well as the listed files.
                    if let files = strings(value, keyPath, allowEmpty: false) {
                        let listed = files.filter { $0 != "system" }
                        policy.trust = listed.isEmpty ? .system : .listed(listed, includingSystem: listed.count < files.count)
                    }
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
                        policy.pins.append(pin)
                        continue
                    }
                    error(keyPath, element: text, "malformed pin \"\(text)\": a pin is \"sha256/\" followed by the 44-character padded base64 of a 32-byte SHA-256 digest (see `pinproxy pin FILE`)")
                }
            case "certificates":
                if let files = strings(value, keyPath) { policy.certificateFiles = files }
            case "enforce":
                if let flag = bool(value, keyPath) { policy.enforce = flag }
            case "require_web_pki_profile":
                if let flag = bool(value, keyPath) { policy.requireWebPKIProfile = flag }
            case "verify_command":
                if let command = strings(value, keyPath, allowEmpty: false) {
                    if command[0].isEmpty { error(keyPath, "\(policy.name): verify_command starts with the executable's path, not an empty string") } else { policy.verifyCommand = command }
                }
            case "expires":
                guard let date = value.date else {
                    typeError(keyPath, value, expected: "a date such as 2027-01-31")
                    continue
                }
                var components = DateComponents()
                (components.year, components.month, components.day) = (date.year, date.month, date.day + 1)
                var calendar = Calendar(identifier: .gregorian)
                calendar.timeZone = .gmt
                guard let end = calendar.date(from: components) else {
                    typeError(keyPath, value, expected: "a date such as 2027-01-31")
                    continue
                }
                policy.expires = (String(format: "%04d-%02d-%02d", date.year, date.month, date.day), end)
            case "include_subdomains":
                if let flag = bool(value, keyPath) { policy.includeSubdomains = flag }
            case "ports":
                if let ports = ports(value, keyPath) { policy.ports = ports }
            case "min_tls":
                if let version = choice(value, keyPath, HostPolicy.TLSVersion.self) { policy.minTLS = version }
            case "mode":
                if let mode = choice(value, keyPath, HostPolicy.Mode.self) { policy.mode = mode }
            case "client_certificate":
                if let file = nonEmptyString(value, keyPath) { policy.clientCertificateFile = file }
            case "client_key":
                if let file = nonEmptyString(value, keyPath) { policy.clientKeyFile = file }
            case "revocation":
                if let text = string(value, keyPath) {
                    switch text {
                    case "off": policy.revocation = .off
                    case "crl": policy.revocation = .crl
                    case "ocsp-staple": policy.revocation = .ocspStaple
                    default: error(keyPath, "\(displayKeyPath(keyPath)) = \"\(text)\" is not one of \"off\", \"crl\", \"ocsp-staple\"")
                    }
                }
            case "crls":
                if let files = strings(value, keyPath) { policy.crlFiles = files }
            default:
                error(keyPath, "\(displayKeyPath(keyPath)) is not read by this pinproxy")
            }
        }
        if found < keyCount {
            for key in table.keys where !Self.policyKeys.contains(key) {
                unknownKey(path + [key], table[key], known: Self.policyKeys)
            }
        }
        return (policy, findings.count == findingsBefore)
    }

    // MARK: Findings

    mutating func error(_ keyPath: [String], element: String? = nil, _ message: String) {
        findings.append(.error(keyPath, element: element, message))
    }

    /// An unknown key, with the valid keys of its table nearest to it (at most 2 edits away):
    /// of equally near ones, those that take `value`'s type, else all of them.
    mutating func unknownKey(_ keyPath: [String], _ value: TOMLValueConvertible?, known: [String]) {
        let key = keyPath.last ?? ""
        var message = "unknown key \(displayKeyPath(keyPath))"
        let distances = known.map { (key: $0, distance: editDistance($0, key)) }
        if let nearest = distances.map(\.distance).min(), nearest <= 2 {
            var candidates = distances.filter { $0.distance == nearest }.map(\.key)
            let typed = candidates.filter { candidate in value.map { Self.key(candidate, takes: $0.type) } ?? false }
            if !typed.isEmpty { candidates = typed }
            message += " (did you mean " + candidates.map { "\"\($0)\"" }.joined(separator: " or ") + "?)"
        }
        error(keyPath, message)
    }

    mutating func typeError(_ keyPath: [String], _ value: TOMLValueConvertible, expected: String) {
        error(keyPath, "\(displayKeyPath(keyPath)) must be \(expected), not \(withArticle(value.type))")
    }

    // MARK: Typed values
    // The readers take their key path as an autoclosure: an entry's key paths are built only
    // when a finding needs one.

    mutating func string(_ value: TOMLValueConvertible, _ keyPath: @autoclosure () -> [String]) -> String? {
        if let string = value.string { return string }
        typeError(keyPath(), value, expected: "a string")
        return nil
    }

    mutating func nonEmptyString(_ value: TOMLValueConvertible, _ keyPath: @autoclosure () -> [String]) -> String? {
        guard let text = string(value, keyPath()) else { return nil }
        if text.isEmpty { error(keyPath(), "\(displayKeyPath(keyPath())) must not be empty") }
        return text.isEmpty ? nil : text
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
            error(keyPath, "\(displayKeyPath(keyPath)) must be more than 0 and at most 86400 seconds")
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
            let bounds = range.upperBound == Int.max ? "at least \(range.lowerBound)" : "between \(range.lowerBound) and \(range.upperBound)"
            error(keyPath, "\(displayKeyPath(keyPath)) must be \(bounds)")
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
                error(keyPath(), "\(displayKeyPath(keyPath())) must be an array of strings, and holds \(withArticle(element.type))")
                return nil
            }
            result.append(string)
        }
        if !allowEmpty && result.isEmpty {
            error(keyPath(), "\(displayKeyPath(keyPath())) must not be empty")
            return nil
        }
        return result
    }

    mutating func choice<T: RawRepresentable & CaseIterable>(_ value: TOMLValueConvertible, _ keyPath: @autoclosure () -> [String], _ type: T.Type) -> T? where T.RawValue == String {
        guard let text = string(value, keyPath()) else { return nil }
        if let parsed = T(rawValue: text) { return parsed }
        let allowed = T.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")
        error(keyPath(), "\(displayKeyPath(keyPath())) = \"\(text)\" is not one of \(allowed)")
        return nil
    }

    mutating func ports(_ value: TOMLValueConvertible, _ keyPath: @autoclosure () -> [String]) -> Set<UInt16>? {
        guard let array = value.array, !array.isEmpty else {
            if value.array == nil { typeError(keyPath(), value, expected: "an array of port numbers") } else {
                error(keyPath(), "\(displayKeyPath(keyPath())) must not be empty")
            }
            return nil
        }
        var result: Set<UInt16> = []
        for element in array {
            guard let port = element.int, (1...65_535).contains(port) else {
                error(keyPath(), "\(displayKeyPath(keyPath())) must hold port numbers from 1 to 65535, and holds \(element.debugDescription)")
                return nil
            }
            result.insert(UInt16(port))
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
