import TOMLKit
import PinproxyCore

/// Where a key is written: the table it belongs to.
enum ConfigSection: String, Sendable, CaseIterable {
    case proxy
    case capture
    /// `[default]` and every `[hosts."PATTERN"]`.
    case policy
    /// Every `[clients."SELECTOR"]`.
    case clients
}

/// What a key's value is: the TOML type it takes and the values it allows. Decoding checks
/// these, `check` names them in its messages, and the docs' key tables show them.
enum ConfigValue: Sendable {
    case bool
    case string
    /// A string that must not be empty.
    case nonEmptyString
    /// One of these words.
    case choice([String])
    case integer(ClosedRange<Int>)
    /// A number of seconds: more than 0, at most a day.
    case seconds
    /// A TOML date (`2027-01-31`).
    case date
    /// An array of port numbers from 1 to 65535.
    case ports
    case strings
    /// A word or an array of strings (`trust`).
    case wordOrStrings

    /// Seconds are more than 0 and at most this.
    static let maxSeconds = 86_400

    /// Whether a value of TOML type `type` is of this kind: of keys equally close to an unknown
    /// one, the value's type picks (`pinz = [...]` is `pins`, `pinz = "public-key"` is `pin`).
    func takes(_ type: TOMLType) -> Bool {
        switch self {
        case .bool: type == .bool
        case .string, .nonEmptyString, .choice: type == .string
        case .integer: type == .int
        case .seconds: type == .int || type == .double
        case .date: type == .date
        case .ports, .strings: type == .array
        case .wordOrStrings: type == .string || type == .array
        }
    }

    /// The values as the docs' key tables list them.
    var written: String {
        switch self {
        case .bool: "bool"
        case .string, .nonEmptyString: "string"
        case .choice(let words): words.map { "\"\($0)\"" }.joined(separator: ", ")
        case .integer(let range): range.upperBound == Int.max ? "integer, at least \(range.lowerBound)" : "integer, \(range.lowerBound) to \(range.upperBound)"
        case .seconds: "seconds, more than 0 and at most \(Self.maxSeconds)"
        case .date: "TOML date"
        case .ports: "list of integers"
        case .strings: "list of strings"
        case .wordOrStrings: "string or list of strings"
        }
    }
}

/// When a running daemon uses a key's new value.
enum ConfigEffect: Sendable, Equatable {
    /// At a reload: new connections use it.
    case reload
    /// At the next start only: a reload that changes it logs a warning naming it.
    case restart
    /// The daemon does not read it: `pinproxy egress apply` does.
    case egressApply
}

/// What applies when a key is not written, as the docs and the reference config show it.
enum ConfigDefault: Sendable, Equatable {
    /// A TOML value: writing the key with it is the same as leaving the key out.
    case value(String)
    /// No value can be written for it; what applies instead, in words.
    case unset(String)
}

/// One config key, declared once: its name, table, value, typed default, one-line doc and when
/// a new value takes effect, and the field of the `Settings` the table decodes into. The field
/// starts as the declared default (`declared(_:_:)`); the decoder reads a table only through its
/// keys' declarations (`ConfigSchema`): a key not declared is unknown.
struct ConfigKey<Settings>: Sendable {
    let name: String
    let section: ConfigSection
    let value: ConfigValue
    /// The typed default: what the field holds when the key is not written (`nil` for an
    /// optional field the key leaves unset).
    let typedDefault: any Sendable
    /// The default as the docs show it.
    let defaultValue: ConfigDefault
    /// The values as the docs list them, where `value.written` says too little.
    let values: String?
    let doc: String
    /// A value the reference config shows for a key whose default cannot be written.
    let example: String?
    /// Reads the TOML value at a key path and sets it; a problem becomes a finding.
    let decode: @Sendable (inout ConfigDecoder, TOMLValueConvertible, [String], inout Settings) -> Void
    /// The field's value as TOML writes it ("nil" when unset), for tests and `check`'s views.
    let fieldText: @Sendable (Settings) -> String
    /// `.reload` unless the declaration says `restartOnly` or `appliedByEgress`.
    private(set) var effect = ConfigEffect.reload
    /// For a restart-only key: whether the running and the loaded settings differ in it.
    private(set) var differs: (@Sendable (_ running: Settings, _ loaded: Settings) -> Bool)?

    /// A key of field `field`, `default` when not written; `read` reads a written value (nil:
    /// a finding says why, and the field keeps its default).
    init<Value: Sendable>(_ name: String, _ section: ConfigSection, _ value: ConfigValue, _ field: WritableKeyPath<Settings, Value> & Sendable,
                          default typedDefault: Value, shown: ConfigDefault? = nil, values: String? = nil, example: String? = nil, doc: String,
                          read: @escaping @Sendable (inout ConfigDecoder, TOMLValueConvertible, [String]) -> Value?) {
        guard let shownDefault = shown ?? tomlText(typedDefault).map(ConfigDefault.value) else {
            preconditionFailure("\(section).\(name): a default that TOML cannot write needs `shown:`")
        }
        (self.name, self.section, self.value, self.typedDefault, self.defaultValue, self.values, self.example, self.doc)
            = (name, section, value, typedDefault, shownDefault, values, example, doc)
        decode = { decoder, toml, keyPath, settings in
            if let read = read(&decoder, toml, keyPath) { settings[keyPath: field] = read }
        }
        fieldText = { tomlText($0[keyPath: field]) ?? "nil" }
    }

    /// A key of optional field `field`, nil when not written: `unset` says what applies then.
    init<Value: Sendable>(_ name: String, _ section: ConfigSection, _ value: ConfigValue, _ field: WritableKeyPath<Settings, Value?> & Sendable,
                          unset: String, values: String? = nil, example: String? = nil, doc: String,
                          read: @escaping @Sendable (inout ConfigDecoder, TOMLValueConvertible, [String]) -> Value?) {
        (self.name, self.section, self.value, self.typedDefault, self.defaultValue, self.values, self.example, self.doc)
            = (name, section, value, Value?.none, .unset(unset), values, example, doc)
        decode = { decoder, toml, keyPath, settings in
            if let read = read(&decoder, toml, keyPath) { settings[keyPath: field] = read }
        }
        fieldText = { tomlText($0[keyPath: field]) ?? "nil" }
    }

    /// The key read at the start only, into `setting`: a reload that changes it cannot apply it.
    func restartOnly<Value: Equatable & Sendable>(_ setting: KeyPath<Settings, Value> & Sendable) -> Self {
        var key = self
        key.effect = .restart
        key.differs = { running, loaded in running[keyPath: setting] != loaded[keyPath: setting] }
        return key
    }

    /// The key read by `pinproxy egress apply`, not by the daemon.
    func appliedByEgress() -> Self {
        var key = self
        key.effect = .egressApply
        return key
    }

    /// The key's declaration without its decoder, for `check`'s hints and the docs.
    var declaration: ConfigKeyDeclaration {
        ConfigKeyDeclaration(name: name, section: section, value: value, defaultValue: defaultValue, values: values ?? value.written, doc: doc,
                             example: example, effect: effect)
    }
}

/// A key's declaration as the docs and the reference config show it.
struct ConfigKeyDeclaration: Sendable {
    let name: String
    let section: ConfigSection
    let value: ConfigValue
    let defaultValue: ConfigDefault
    let values: String
    let doc: String
    let example: String?
    let effect: ConfigEffect
}

/// A field's starting value, its key's declared default: `var idleTimeout: TimeInterval =
/// declared(.proxy, "idle_timeout")` holds `ConfigSchema.proxy`'s default for `idle_timeout`
/// until the config sets it. The key and the field have the same type (a test builds every
/// table's defaults, so a mismatch cannot pass it). The field stays a plain stored property, so
/// that the decoder's key paths write it in place (through a property wrapper each write was a
/// get and a set, 2,000 instructions: 100,000 entries write 200,000 keys).
func declared<Value>(_ section: ConfigSection, _ name: String) -> Value {
    ConfigSchema.typedDefault(section, name) as! Value  // swiftlint:disable:this force_cast
}

/// A value as TOML writes it (`10`, `"logfmt"`, `[443]`, `["127.0.0.1:3128"]`); nil for a value
/// TOML cannot write (nil, or a type with no text of its own).
func tomlText(_ value: Any) -> String? {
    let mirror = Mirror(reflecting: value)
    if mirror.displayStyle == .optional { return mirror.children.first.flatMap { tomlText($0.value) } }
    switch value {
    case let written as TOMLWritable: return written.tomlText
    case let flag as Bool: return flag ? "true" : "false"
    case let number as Int: return String(number)
    case let number as UInt16: return String(number)
    case let seconds as Double:
        return seconds == seconds.rounded() && abs(seconds) < 1e15 ? String(Int(seconds)) : String(seconds)
    case let text as String:
        return "\"" + text.replacingEach(["\\": "\\\\", "\"": "\\\""]) + "\""
    case let ports as Set<UInt16>: return tomlText(ports.sorted())
    case let word as any RawRepresentable: return tomlText(word.rawValue)
    case let array as [Any]:
        let elements = array.map { tomlText($0) ?? (($0 as? CustomStringConvertible).flatMap { tomlText($0.description) }) }
        guard elements.allSatisfy({ $0 != nil }) else { return nil }
        return "[" + elements.map { $0! }.joined(separator: ", ") + "]"
    case let described as CustomStringConvertible: return tomlText(described.description)
    default: return nil
    }
}

/// A value with a TOML text of its own (`trust`'s words or list).
protocol TOMLWritable {
    var tomlText: String { get }
}

// MARK: Typed declarations
// Each reads its value with the reader its `ConfigValue` names, so that the type, the range
// and the messages come from the declaration.

extension ConfigKey {
    static func bool(_ name: String, _ section: ConfigSection, _ field: WritableKeyPath<Settings, Bool> & Sendable, default value: Bool,
                     doc: String) -> Self {
        Self(name, section, .bool, field, default: value, doc: doc) { $0.bool($1, $2) }
    }

    static func integer(_ name: String, _ section: ConfigSection, _ field: WritableKeyPath<Settings, Int> & Sendable, in range: ClosedRange<Int>,
                        default value: Int, doc: String) -> Self {
        Self(name, section, .integer(range), field, default: value, doc: doc) { $0.integer($1, $2, in: range) }
    }

    static func integer(_ name: String, _ section: ConfigSection, _ field: WritableKeyPath<Settings, Int?> & Sendable, in range: ClosedRange<Int>,
                        unset: String, example: String? = nil, doc: String) -> Self {
        Self(name, section, .integer(range), field, unset: unset, example: example, doc: doc) { $0.integer($1, $2, in: range) }
    }

    static func seconds(_ name: String, _ section: ConfigSection, _ field: WritableKeyPath<Settings, Double> & Sendable, default value: Double,
                        doc: String) -> Self {
        Self(name, section, .seconds, field, default: value, doc: doc) { $0.seconds($1, $2) }
    }

    static func choice<Word: RawRepresentable & CaseIterable & Sendable>(_ name: String, _ section: ConfigSection,
                                                                        _ field: WritableKeyPath<Settings, Word> & Sendable, default value: Word,
                                                                        doc: String) -> Self where Word.RawValue == String {
        Self(name, section, .choice(Word.allCases.map(\.rawValue)), field, default: value, doc: doc) { $0.choice($1, $2, Word.self) }
    }

    static func strings(_ name: String, _ section: ConfigSection, _ field: WritableKeyPath<Settings, [String]> & Sendable, default value: [String],
                        values: String? = nil, doc: String) -> Self {
        Self(name, section, .strings, field, default: value, values: values, doc: doc) { $0.strings($1, $2) }
    }

    static func strings(_ name: String, _ section: ConfigSection, _ field: WritableKeyPath<Settings, [String]?> & Sendable, unset: String,
                        values: String? = nil, example: String? = nil, doc: String) -> Self {
        Self(name, section, .strings, field, unset: unset, values: values, example: example, doc: doc) { $0.strings($1, $2) }
    }

    static func ports(_ name: String, _ section: ConfigSection, _ field: WritableKeyPath<Settings, Set<UInt16>> & Sendable, default value: Set<UInt16>,
                      doc: String) -> Self {
        Self(name, section, .ports, field, default: value, doc: doc) { $0.ports($1, $2) }
    }

    static func ports(_ name: String, _ section: ConfigSection, _ field: WritableKeyPath<Settings, Set<UInt16>?> & Sendable, unset: String,
                      example: String? = nil, doc: String) -> Self {
        Self(name, section, .ports, field, unset: unset, example: example, doc: doc) { $0.ports($1, $2) }
    }

    static func nonEmptyString(_ name: String, _ section: ConfigSection, _ field: WritableKeyPath<Settings, String?> & Sendable, unset: String,
                               values: String? = nil, example: String? = nil, doc: String) -> Self {
        Self(name, section, .nonEmptyString, field, unset: unset, values: values, example: example, doc: doc) { $0.nonEmptyString($1, $2) }
    }
}

/// The keys of one table, in the order their hints and docs list them.
struct ConfigKeys<Settings>: Sendable {
    let keys: [ConfigKey<Settings>]
    /// The keys' names, to look a table's keys up by (without copying a declaration each time).
    let names: [String]
    private let byName: [String: Int]

    init(_ keys: [ConfigKey<Settings>]) {
        self.keys = keys
        names = keys.map(\.name)
        byName = Dictionary(uniqueKeysWithValues: keys.enumerated().map { ($0.element.name, $0.offset) })
    }

    subscript(name: String) -> ConfigKey<Settings>? { byName[name].map { keys[$0] } }

    var declarations: [ConfigKeyDeclaration] { keys.map(\.declaration) }

    /// The restart-only keys that differ between the `running` and the `loaded` settings, in
    /// declaration order.
    func restartOnlyChanges(from running: Settings, to loaded: Settings) -> [String] {
        keys.compactMap { key in key.differs?(running, loaded) == true ? key.name : nil }
    }
}
