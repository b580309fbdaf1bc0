import TOMLKit

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

/// What applies when a key is not written.
enum ConfigDefault: Sendable, Equatable {
    /// A TOML value: writing the key with it is the same as leaving the key out.
    case value(String)
    /// No value can be written for it; what applies instead, in words.
    case unset(String)
}

/// One config key, declared once: its name, table, value, default, one-line doc and when a new
/// value takes effect, and how a value read from TOML is set on the `Settings` the table decodes
/// into. The decoder reads a table only through its keys' declarations (`ConfigSchema`): a key
/// not declared is unknown.
struct ConfigKey<Settings>: Sendable {
    let name: String
    let section: ConfigSection
    let value: ConfigValue
    let defaultValue: ConfigDefault
    /// The values as the docs list them, where `value.written` says too little.
    let values: String?
    let doc: String
    /// Reads the TOML value at a key path and sets it; a problem becomes a finding.
    let decode: @Sendable (inout ConfigDecoder, TOMLValueConvertible, [String], inout Settings) -> Void
    /// `.reload` unless the declaration says `restartOnly` or `appliedByEgress`.
    private(set) var effect = ConfigEffect.reload
    /// For a restart-only key: whether the running and the loaded settings differ in it.
    private(set) var differs: (@Sendable (_ running: Settings, _ loaded: Settings) -> Bool)?

    init(_ name: String, _ section: ConfigSection, _ value: ConfigValue, default defaultValue: ConfigDefault, values: String? = nil,
         doc: String, decode: @escaping @Sendable (inout ConfigDecoder, TOMLValueConvertible, [String], inout Settings) -> Void) {
        (self.name, self.section, self.value, self.defaultValue, self.values, self.doc, self.decode)
            = (name, section, value, defaultValue, values, doc, decode)
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
                             effect: effect)
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
    let effect: ConfigEffect
}

// MARK: Typed declarations
// Each reads its value with the reader its `ConfigValue` names, so that the type, the range
// and the messages come from the declaration.

extension ConfigKey {
    static func bool(_ name: String, _ section: ConfigSection, default defaultValue: ConfigDefault, doc: String,
                     _ set: @escaping @Sendable (inout Settings, Bool) -> Void) -> Self {
        Self(name, section, .bool, default: defaultValue, doc: doc) { decoder, value, keyPath, settings in
            if let flag = decoder.bool(value, keyPath) { set(&settings, flag) }
        }
    }

    static func integer(_ name: String, _ section: ConfigSection, in range: ClosedRange<Int>, default defaultValue: ConfigDefault, doc: String,
                        _ set: @escaping @Sendable (inout Settings, Int) -> Void) -> Self {
        Self(name, section, .integer(range), default: defaultValue, doc: doc) { decoder, value, keyPath, settings in
            if let count = decoder.integer(value, keyPath, in: range) { set(&settings, count) }
        }
    }

    static func seconds(_ name: String, _ section: ConfigSection, default defaultValue: ConfigDefault, doc: String,
                        _ set: @escaping @Sendable (inout Settings, Double) -> Void) -> Self {
        Self(name, section, .seconds, default: defaultValue, doc: doc) { decoder, value, keyPath, settings in
            if let seconds = decoder.seconds(value, keyPath) { set(&settings, seconds) }
        }
    }

    static func choice<Word: RawRepresentable & CaseIterable & Sendable>(_ name: String, _ section: ConfigSection, _ type: Word.Type,
                                                              default defaultValue: ConfigDefault, doc: String,
                                                              _ set: @escaping @Sendable (inout Settings, Word) -> Void) -> Self
        where Word.RawValue == String {
        Self(name, section, .choice(Word.allCases.map(\.rawValue)), default: defaultValue, doc: doc) { decoder, value, keyPath, settings in
            if let word = decoder.choice(value, keyPath, Word.self) { set(&settings, word) }
        }
    }

    static func strings(_ name: String, _ section: ConfigSection, default defaultValue: ConfigDefault, values: String? = nil, doc: String,
                        _ set: @escaping @Sendable (inout Settings, [String]) -> Void) -> Self {
        Self(name, section, .strings, default: defaultValue, values: values, doc: doc) { decoder, value, keyPath, settings in
            if let texts = decoder.strings(value, keyPath) { set(&settings, texts) }
        }
    }

    static func ports(_ name: String, _ section: ConfigSection, default defaultValue: ConfigDefault, doc: String,
                      _ set: @escaping @Sendable (inout Settings, Set<UInt16>) -> Void) -> Self {
        Self(name, section, .ports, default: defaultValue, doc: doc) { decoder, value, keyPath, settings in
            if let ports = decoder.ports(value, keyPath) { set(&settings, ports) }
        }
    }

    static func nonEmptyString(_ name: String, _ section: ConfigSection, default defaultValue: ConfigDefault, values: String? = nil, doc: String,
                               _ set: @escaping @Sendable (inout Settings, String) -> Void) -> Self {
        Self(name, section, .nonEmptyString, default: defaultValue, values: values, doc: doc) { decoder, value, keyPath, settings in
            if let text = decoder.nonEmptyString(value, keyPath) { set(&settings, text) }
        }
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
