import Foundation

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
    let path: [String]
    /// `default` or `hosts."KEY"`.
    let name: String
    /// nil for `[default]`.
    let pattern: HostPattern?
    var action: HostPolicy.Action = .verify
    var trust: Trust = .system
    var validateHost = true
    var pinKind: HostPolicy.PinKind = .none
    /// The `pins` as written (each well-formed: a malformed pin is a decode error).
    var pins: [Pin] = []
    var certificateFiles: [String] = []
    var enforce = true
    /// `require_web_pki_profile`: the web-PKI issuance rules for system and listed anchors.
    var requireWebPKIProfile = true
    /// `verify_command` as written: the executable, then its arguments.
    var verifyCommand: [String]?
    /// `expires` as written (YYYY-MM-DD) and the first instant pins are no longer enforced.
    var expires: (written: String, end: Date)?
    var includeSubdomains = false
    /// nil: `proxy.allow_ports`.
    var ports: Set<UInt16>?
    var minTLS: HostPolicy.TLSVersion = .v1_2
    var revocation: Revocation = .off
    /// nil when `crls` is not written.
    var crlFiles: [String]?
    var mode: HostPolicy.Mode = .intercept
    var ct: HostPolicy.CTMode = .off
    /// `client_certificate` and `client_key` as written.
    var clientCertificateFile: String?
    var clientKeyFile: String?

    init(path: [String], name: String, pattern: HostPattern?) {
        self.path = path
        self.name = name
        self.pattern = pattern
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
        if !key.isEmpty && key.utf8.allSatisfy(ConfigSource.isBareKeyByte) {
            result += key
        } else {
            result += "\"" + key.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
        }
    }
    return result
}
