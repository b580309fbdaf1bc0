import Dispatch
import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import TOMLKit

/// The first stage of loading: a parsed TOML document into Swift values — `[proxy]`,
/// `[resolve]` and `[capture]` settings, and each policy table as a `RawPolicy` with the key
/// paths it was written at. Every key is read through its declaration in `ConfigSchema`;
/// unknown keys, wrong types, values out of range, words that are not one of the choices and
/// malformed pins are reported here; no file is read and no rule across keys is checked.
///
/// TOMLKit 0.6 leaks: every table it iterates copies its keys into memory it never frees, and a
/// document is never freed. A policy table's keys are therefore looked up by name (it is
/// iterated only to name an unknown key), and `release(_:)` frees each document once loaded.
struct ConfigDecoder {
    private(set) var findings: [Finding] = []

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

    /// The top-level tables: unknown ones reported, `[proxy]`, `[resolve]` and `[capture]` decoded.
    mutating func decodeTopLevel(_ document: TOMLTable) -> (proxy: ProxySettings, resolve: [String: [IPAddress]], capture: CaptureSettings) {
        for key in document.keys where !ConfigSchema.tables.contains(key) {
            unknownKey([key], document[key], known: ConfigSchema.tables) { $1 == .table }
        }
        var proxy = ProxySettings()
        if let value = document["proxy"] {
            if let table = value.table { decode(table, ["proxy"], ConfigSchema.proxy, into: &proxy) } else { typeError(["proxy"], value, expected: "a table") }
        }
        var resolve: [String: [IPAddress]] = [:]
        if let value = document["resolve"] {
            if let table = value.table { resolve = decodeResolve(table) } else { typeError(["resolve"], value, expected: "a table") }
        }
        var capture = CaptureSettings()
        if let value = document["capture"] {
            if let table = value.table {
                capture.isWritten = true
                decode(table, ["capture"], ConfigSchema.capture, into: &capture)
            } else { typeError(["capture"], value, expected: "a table") }
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

    /// Every key of `table` (written at `path`) through its declaration in `keys`, in the
    /// table's order; a key not declared is unknown.
    mutating func decode<Settings>(_ table: TOMLTable, _ path: [String], _ keys: ConfigKeys<Settings>, into settings: inout Settings) {
        for (name, value) in table {
            if let key = keys[name] { key.decode(&self, value, path + [name], &settings) } else { unknownKey(path + [name], value, keys) }
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
        var policy = RawPolicy.unwritten(path: path, name: name, pattern: pattern)
        let keyCount = table.count
        var found = 0
        let keys = ConfigSchema.policy
        for (index, name) in keys.names.enumerated() where found < keyCount {
            guard let value = table[name] else { continue }
            found += 1
            keys.keys[index].decode(&self, value, path + [name], &policy)
        }
        if found < keyCount {
            for key in table.keys where ConfigSchema.policy[key] == nil {
                unknownKey(path + [key], table[key], ConfigSchema.policy)
            }
        }
        return (policy, findings.count == findingsBefore)
    }

    // MARK: Findings

    mutating func error(_ keyPath: [String], element: String? = nil, _ message: String) {
        findings.append(.error(keyPath, element: element, message))
    }

    /// An unknown key, with the keys of its table nearest to it.
    mutating func unknownKey<Settings>(_ keyPath: [String], _ value: TOMLValueConvertible?, _ keys: ConfigKeys<Settings>) {
        let byName = Dictionary(uniqueKeysWithValues: keys.keys.map { ($0.name, $0.value) })
        unknownKey(keyPath, value, known: keys.names) { byName[$0]?.takes($1) ?? false }
    }

    /// An unknown key, with the valid keys of its table nearest to it (at most 2 edits away):
    /// of equally near ones, those that take `value`'s type, else all of them.
    mutating func unknownKey(_ keyPath: [String], _ value: TOMLValueConvertible?, known: [String], takes: (String, TOMLType) -> Bool) {
        let key = keyPath.last ?? ""
        var message = "unknown key \(displayKeyPath(keyPath))"
        let distances = known.map { (key: $0, distance: editDistance($0, key)) }
        if let nearest = distances.map(\.distance).min(), nearest <= 2 {
            var candidates = distances.filter { $0.distance == nearest }.map(\.key)
            let typed = candidates.filter { candidate in value.map { takes(candidate, $0.type) } ?? false }
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
        guard number > 0, number <= Double(ConfigValue.maxSeconds) else {
            error(keyPath, "\(displayKeyPath(keyPath)) must be more than 0 and at most \(ConfigValue.maxSeconds) seconds")
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
        result.reserveCapacity(array.count)
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
