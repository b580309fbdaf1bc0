import FoundationEssentials
import PinproxyCore

/// A config as written, after decoding and before its rules are checked and its files read:
/// the output of `ConfigDecoder`, the input of `ConfigRules` and `PolicyFiles`.
struct RawPolicy: Sendable {
    /// `trust` as written.
    enum Trust: Sendable, Equatable {
        case system
        case pinned
        case none
        /// Certificate files and directories, with or without the system store.
        case listed([String], includingSystem: Bool)

        /// Whether chains are verified to a CA-style store (the system's, or listed anchors).
        var verifiesToAuthorities: Bool {
            switch self {
            case .system, .listed: return true
            case .pinned, .none: return false
            }
        }
    }

    /// `revocation` as written (the CRLs come from `crlFiles`).
    enum Revocation: String, Sendable, Equatable, CaseIterable {
        case off, crl
        case ocspStaple = "ocsp-staple"
    }

    /// `["default"]` or `["hosts", KEY]`: where the entry is written.
    private(set) var path: [String]
    /// `default` or `hosts."KEY"`.
    private(set) var name: String
    /// nil for `[default]`.
    private(set) var pattern: HostPattern?
    var action: HostPolicy.Action = declared(.policy, "action")
    var trust: Trust = declared(.policy, "trust")
    var validateHost: Bool = declared(.policy, "validate_host")
    var pinKind: HostPolicy.PinKind = declared(.policy, "pin")
    /// The `pins` as written (each well-formed: a malformed pin is a decode error).
    var pins: [Pin] = declared(.policy, "pins")
    var certificateFiles: [String] = declared(.policy, "certificates")
    var enforce: Bool = declared(.policy, "enforce")
    /// `require_web_pki_profile`: the web-PKI issuance rules for system and listed anchors.
    var requireWebPKIProfile: Bool = declared(.policy, "require_web_pki_profile")
    /// `verify_command` as written: the executable, then its arguments.
    var verifyCommand: [String]? = declared(.policy, "verify_command")
    /// `expires` as written (YYYY-MM-DD) and the first instant pins are no longer enforced.
    var expires: (written: String, end: Date)? = declared(.policy, "expires")
    var includeSubdomains: Bool = declared(.policy, "include_subdomains")
    /// nil: `proxy.allow_ports`.
    var ports: Set<UInt16>? = declared(.policy, "ports")
    var minTLS: HostPolicy.TLSVersion = declared(.policy, "min_tls")
    var revocation: Revocation = declared(.policy, "revocation")
    /// nil when `crls` is not written.
    var crlFiles: [String]? = declared(.policy, "crls")
    var mode: HostPolicy.Mode = declared(.policy, "mode")
    var ct: HostPolicy.CTMode = declared(.policy, "ct")
    /// `client_certificate` and `client_key` as written.
    var clientCertificateFile: String? = declared(.policy, "client_certificate")
    var clientKeyFile: String? = declared(.policy, "client_key")

    /// An entry that writes no key: every field is its key's declared default. A copy of one
    /// made once: an initializer would look every default up again (`declared(_:_:)`), for each of
    /// 100,000 entries.
    static func unwritten(path: [String], name: String, pattern: HostPattern?) -> RawPolicy {
        var raw = prototype
        (raw.path, raw.name, raw.pattern) = (path, name, pattern)
        return raw
    }

    private static let prototype = RawPolicy()

    private init() {
        (path, name, pattern) = ([], "", nil)
    }

    /// Whether pins are given, by digest or by certificate.
    var hasPinMaterial: Bool { !pins.isEmpty || !certificateFiles.isEmpty }

    /// The `trust` list and `crls` as written.
    var writtenFiles: PolicyEntry.WrittenFiles {
        guard case .listed(let files, let includingSystem) = trust else { return .init(trust: nil, crls: crlFiles) }
        return .init(trust: (includingSystem ? ["system"] : []) + files, crls: crlFiles)
    }

    /// Whether the entry pins anything.
    var isPinned: Bool { pinKind != .none && hasPinMaterial }
}

extension RawPolicy.Trust: TOMLWritable {
    var tomlText: String {
        switch self {
        case .system: #""system""#
        case .pinned: #""pinned""#
        case .none: #""none""#
        case .listed(let files, let includingSystem): PinproxyPolicy.tomlText((includingSystem ? ["system"] : []) + files) ?? "[]"
        }
    }
}

/// A problem found by a stage, placed by key path; the loader turns it into `FILE:LINE`.
struct Finding: Sendable {
    let severity: Diagnostic.Severity
    /// The key path the problem is about (an entry's path for a whole-entry problem).
    let keyPath: [String]
    /// An array element written on its own line, to place the problem more precisely.
    let element: String?
    let message: String

    static func error(_ keyPath: [String], element: String? = nil, _ message: String) -> Finding {
        Finding(severity: .error, keyPath: keyPath, element: element, message: message)
    }

    static func warning(_ keyPath: [String], _ message: String) -> Finding {
        Finding(severity: .warning, keyPath: keyPath, element: nil, message: message)
    }
}

extension [Finding] {
    var hasErrors: Bool { contains { $0.severity == .error } }
}

/// `hosts."api.test".pins` or `proxy.listen`: a key path as the config writes it (a quoted
/// key with its `"` and `\` escaped).
func displayKeyPath(_ keyPath: [String]) -> String {
    var result = ""
    for key in keyPath {
        if !result.isEmpty { result += "." }
        if !key.isEmpty && key.utf8.allSatisfy(ConfigLexer.isBareKeyByte) {
            result += key
        } else if !key.utf8.contains(where: { $0 == UInt8(ascii: "\\") || $0 == UInt8(ascii: "\"") }) {
            // Nothing to escape (every host key of a usual config): the key in one piece.
            result += "\""
            result += key
            result += "\""
        } else {
            result += "\""
            for character in key.unicodeScalars {
                if character == "\\" || character == "\"" { result += "\\" }
                result.unicodeScalars.append(character)
            }
            result += "\""
        }
    }
    return result
}
