import Glibc
import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import TOMLKit

/// A `[clients]` selector as written (and as `evaluate --client` takes it), before a user
/// name is looked up.
public enum ClientSelectorText: Sendable, Equatable {
    case uid(UInt32)
    case user(String)
    case exe(String)
    case unit(String)
    case unknown
    case remote
    /// `net:CIDR`: forwarded clients from that network.
    case network(ClientNetwork)

    /// What a `net:` selector starts with.
    public static let networkPrefix = "net:"

    /// The selector written as `key`, or why it is not one.
    public static func parse(_ key: String) -> Result<ClientSelectorText, ClientSelectorError> {
        let (kind, value) = key.firstIndex(of: ":").map { (key[..<$0], String(key[key.index(after: $0)...])) } ?? (Substring(key), "")
        switch kind {
        case "unknown" where key == "unknown": return .success(.unknown)
        case "remote" where key == "remote": return .success(.remote)
        case "uid":
            guard !value.isEmpty, value.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
                  value == "0" || !value.hasPrefix("0"), let uid = UInt32(value), uid != UInt32.max else {
                return .failure(.init("uid:N takes a decimal uid from 0 to 4294967294, without leading zeros"))
            }
            return .success(.uid(uid))
        case "user":
            guard !value.isEmpty, value.unicodeScalars.allSatisfy({ $0.isASCII && $0.value > 0x20 && $0.value < 0x7F && $0 != ":" }) else {
                return .failure(.init("user:NAME takes a user name (printable ASCII, no spaces or colons)"))
            }
            return .success(.user(value))
        case "exe":
            guard value.hasPrefix("/"), !value.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
                return .failure(.init("exe: takes an absolute path, such as exe:/usr/bin/git"))
            }
            let parts = value.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
            guard value != "/", !parts.contains(where: { $0.isEmpty || $0 == "." || $0 == ".." }) else {
                return .failure(.init("exe:\(value) is not written as the kernel reports a program's path: no //, /./, /../ or trailing /"))
            }
            return .success(.exe(value))
        case "unit":
            guard SystemUnit.isServiceName(value) else {
                return .failure(.init("unit: takes a system service, such as unit:backup.service (user units are never matched)"))
            }
            return .success(.unit(value))
        case "net":
            return ClientNetwork.parse(value).map { ClientSelectorText.network($0) }
        default:
            return .failure(.init("not a client selector: use uid:N, user:NAME, exe:/absolute/path, unit:NAME.service, net:CIDR, unknown or remote"))
        }
    }
}

/// Why a text is not a client selector.
public struct ClientSelectorError: Error, Sendable, CustomStringConvertible {
    public let message: String
    init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// A `[clients."SELECTOR"]` section as written: decoded, its user not yet looked up.
struct RawClientSection: Sendable {
    let key: String
    let line: Int
    let selector: ClientSelectorText
    var allow: [HostPattern]? = declared(.clients, "allow")
    var deny: [HostPattern] = declared(.clients, "deny")
    var enforce: Bool = declared(.clients, "enforce")

    /// A section that writes no key: every field is its key's declared default.
    init(key: String, line: Int, selector: ClientSelectorText) {
        (self.key, self.line, self.selector) = (key, line, selector)
    }
}

extension ConfigDecoder {
    /// Every `[clients."SELECTOR"]` section of `table`, in file order (`line` places a key).
    mutating func decodeClients(_ table: TOMLTable, line: (String) -> Int) -> [RawClientSection] {
        var sections: [RawClientSection] = []
        for key in table.keys.sorted(by: { (line($0), $0) < (line($1), $1) }) {
            let keyPath = ["clients", key]
            guard let value = table[key] else { continue }
            guard let section = value.table else {
                typeError(keyPath, value, expected: "a table such as [clients.\"\(key)\"]")
                continue
            }
            let selector: ClientSelectorText
            switch ClientSelectorText.parse(key) {
            case .success(let parsed): selector = parsed
            case .failure(let problem):
                error(keyPath, "\(displayKeyPath(keyPath)): \(problem.message)")
                continue
            }
            var raw = RawClientSection(key: key, line: line(key), selector: selector)
            decode(section, keyPath, ConfigSchema.clients, into: &raw)
            sections.append(raw)
        }
        return sections
    }

    /// An array of host patterns (`api.example.com`, `*.example.com`, an IP literal).
    mutating func hostPatterns(_ value: TOMLValueConvertible, _ keyPath: [String]) -> [HostPattern]? {
        guard let texts = strings(value, keyPath) else { return nil }
        var patterns: [HostPattern] = []
        for text in texts {
            guard let pattern = HostPattern(text) else {
                error(keyPath, element: text, "\(displayKeyPath(keyPath)): \"\(text)\" is not a host pattern: a DNS name, \"*.\" followed by a name, or an IP literal")
                continue
            }
            patterns.append(pattern)
        }
        return patterns
    }
}

/// The stage after decoding for `[clients]`: users looked up, and the rules across sections.
enum ClientRulesCheck {
    /// What the check reads from the system: a user's uid, a path's real path.
    struct System {
        var uid: (String) -> UserDatabase.Answer<UInt32> = UserDatabase.uid(ofUser:)
        var realPath: (String) -> String? = ProcessExecutables.realPath
    }

    /// The rules the sections make, and what is wrong with them: a user the database does not
    /// know, two sections naming one uid, an `exe:` path that is a symbolic link (the kernel
    /// reports the real path, so the section could never match) or that does not exist.
    static func rules(_ raw: [RawClientSection], system: System = System()) -> (ClientRules, [Finding]) {
        var sections: [ClientSection] = []
        var findings: [Finding] = []
        var byUID: [UInt32: RawClientSection] = [:]
        for section in raw {
            let keyPath = ["clients", section.key]
            let name = displayKeyPath(keyPath)
            let selector: ClientSelector
            switch section.selector {
            case .uid(let uid): selector = .uid(uid)
            case .user(let user):
                switch system.uid(user) {
                case .found(let uid): selector = .user(user, uid: uid)
                case .missing:
                    findings.append(.error(keyPath, "\(name): the user database has no user \(user)"))
                    continue
                case .failed(let code):
                    findings.append(.error(keyPath, "\(name): the user database cannot be read: \(String(cString: strerror(code)))"))
                    continue
                }
            case .exe(let path):
                if let real = system.realPath(path), real != path {
                    findings.append(.error(keyPath, "\(name): \(path) resolves to \(real), and the kernel reports a program by its real path: write exe:\(real), or this section never matches"))
                    continue
                }
                if system.realPath(path) == nil {
                    findings.append(.warning(keyPath, "\(name): \(path) does not exist (yet): the section matches once a program runs from there"))
                }
                selector = .exe(path)
            case .unit(let unit): selector = .unit(unit)
            case .unknown: selector = .unknown
            case .remote: selector = .remote
            case .network(let network): selector = .network(network)
            }
            switch selector {
            case .uid(let uid), .user(_, let uid):
                if let earlier = byUID[uid] {
                    findings.append(.error(keyPath, "\(name) names uid \(uid), as \(displayKeyPath(["clients", earlier.key])) (line \(earlier.line)) does: write one section per user"))
                    continue
                }
                byUID[uid] = section
            case .exe, .unit, .unknown, .remote, .network:
                break
            }
            sections.append(ClientSection(selector: selector, key: section.key, line: section.line, allow: section.allow,
                                          deny: section.deny, enforce: section.enforce))
        }
        return (ClientRules(sections: sections), findings)
    }
}
