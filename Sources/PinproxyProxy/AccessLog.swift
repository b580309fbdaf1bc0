import Glibc
import FoundationEssentials
import PinproxyCore
import Logging
import PinproxyInterop
import PinproxyPolicy
import PinproxyService

/// pinproxy's log: one line per event on stderr, as logfmt or JSON, with constant field
/// names. Connection decisions are logged once, by `ConnectionRecorder`.
public struct AccessLog: Sendable {
    /// Field names, in the order lines print them.
    public enum Field: String, CaseIterable, Sendable {
        case time, level, event, client
        case clientUID = "client_uid", clientUser = "client_user", clientUnit = "client_unit", clientExe = "client_exe"
        case clientAddress = "client_address", clientNet = "client_net"
        case host, port, entry, outcome, reason, status
        /// `ADDR:PORT` (`[ADDR]:PORT` for IPv6) of the upstream the connection connected to:
        /// on decision and tunnel lines.
        case upstream
        case reopenOutcome = "reopen_outcome", reopenReason = "reopen_reason"
        case alpn, detail
        /// The CT check's answer, and every SCT found: on decisions where the entry sets `ct`.
        case ct, scts
        case chain, presentedChain = "presented_chain", verifiedChain = "verified_chain", verifiedPins = "verified_pins"
        /// `connect` or `transparent`: on decision and tunnel lines.
        case listener
        case bytesUp = "bytes_up", bytesDown = "bytes_down", duration
        case address, config, error, entries, warning

        /// How JSON lines write the field when it is given as text (logfmt writes every value as
        /// text; the certificate fields are arrays).
        var jsonType: JSONType {
            switch self {
            case .port, .status, .bytesUp, .bytesDown, .entries, .clientUID: return .integer
            case .duration: return .number
            case .time, .level, .event, .client, .clientUser, .clientUnit, .clientExe, .clientAddress, .clientNet, .host, .upstream, .entry, .outcome, .reason, .reopenOutcome,
                 .reopenReason, .alpn, .detail, .ct, .scts, .chain, .presentedChain, .verifiedChain, .verifiedPins, .listener, .address, .config, .error,
                 .warning:
                return .string
            }
        }
    }

    /// A field's JSON type: docs/logs-and-metrics.md gives each field's, and a test checks
    /// every line against it.
    public enum JSONType: Sendable {
        case string, integer, number
    }

    /// The certificates of a decision: the chain the server presented, and the path OpenSSL
    /// verified (leaf to anchor; nil when it verified none). logfmt lines carry them as `chain`
    /// (`SUBJECT sha256/PIN | …`, for people) and `verified_pins` (`sha256/PIN,…`); JSON lines
    /// as `presented_chain` and `verified_chain` (arrays of `{"subject", "spki"}`) and
    /// `verified_pins` (an array). A pin is base64, so no subject can forge `verified_pins`.
    public struct Certificates: Sendable {
        public let presented: [Certificate]
        public let verified: [Certificate]?

        public init(presented: [Certificate], verified: [Certificate]?) {
            self.presented = presented
            self.verified = verified
        }
    }

    private let format: ProxySettings.LogFormat
    private let prefixer: SyslogPrefixer
    private let write: @Sendable (String) -> Void

    /// A log writing `format` lines to stderr, or to `write` (the unit tests keep them).
    public init(format: ProxySettings.LogFormat, write: @escaping @Sendable (String) -> Void = { StandardError.writeLine($0) }) {
        self.format = format
        prefixer = SyslogPrefixer.detect()
        self.write = write
    }

    /// Writes one event line: time, level and event first, then `fields` and `certificates` in
    /// `Field` order (a field given twice keeps its last value).
    public func emit(_ level: Logger.Level, _ event: String, _ fields: [(Field, String)], certificates: Certificates? = nil) {
        var values = [LineValue?](repeating: nil, count: Field.allCases.count)
        for (field, value) in fields { values[Self.rank[field]!] = .text(value) }  // `rank` holds every Field: never nil
        if let certificates {
            for (field, value) in certificateFields(certificates) { values[Self.rank[field]!] = value }
        }
        var line: [(String, LineValue)] = [("time", .text(rfc3339Milliseconds(Date()))), ("level", .text(LineFormat.levelName(level))),
                                           ("event", .text(event))]
        line.reserveCapacity(3 + fields.count)
        for (index, value) in values.enumerated() {
            if let value { line.append((Field.allCases[index].rawValue, value)) }
        }
        let text = format == .json ? LineFormat.json(line) : LineFormat.logfmt(line)
        write(prefixer.format(text, priority: LineFormat.priority(level)))
    }

    /// The fields `certificates` makes in this log's format.
    private func certificateFields(_ certificates: Certificates) -> [(Field, LineValue)] {
        func described(_ chain: [Certificate]) -> LineValue {
            .certificates(chain.map { (subject: $0.subject, spki: Pin(digest: $0.publicKeySHA256).description) })
        }
        var fields: [(Field, LineValue)] = []
        if !certificates.presented.isEmpty {
            fields.append((format == .json ? .presentedChain : .chain, described(certificates.presented)))
        }
        if let verified = certificates.verified, !verified.isEmpty {
            if format == .json { fields.append((.verifiedChain, described(verified))) }
            fields.append((.verifiedPins, .list(verified.map { Pin(digest: $0.publicKeySHA256).description })))
        }
        return fields
    }

    /// Each field's position in a line.
    private static let rank = Dictionary(uniqueKeysWithValues: Field.allCases.enumerated().map { ($0.element, $0.offset) })
}

/// One field's value: JSON writes lists as arrays, logfmt as one text.
enum LineValue {
    case text(String)
    /// logfmt: `A,B,…`.
    case list([String])
    /// Each certificate's subject and public-key pin. logfmt: `SUBJECT sha256/PIN | …`.
    case certificates([(subject: String, spki: String)])

    var logfmtText: String {
        switch self {
        case .text(let text): return text
        case .list(let texts): return texts.joined(separator: ",")
        case .certificates(let certificates): return certificates.map { "\($0.subject) \($0.spki)" }.joined(separator: " | ")
        }
    }
}

/// Formats an event as one logfmt or JSON line. Under journald each line starts with its
/// syslog priority: `<6>` allowed connections and lifecycle, `<4>` refusals and report-only,
/// `<3>` daemon errors. A field without a value is `-` in logfmt and left out of JSON; JSON
/// writes a field's number as a number (`AccessLog.Field.jsonType`).
enum LineFormat {
    static func levelName(_ level: Logger.Level) -> String {
        switch level {
        case .trace, .debug: return "debug"
        case .info, .notice: return "info"
        case .warning: return "warning"
        case .error, .critical: return "error"
        }
    }

    static func priority(_ level: Logger.Level) -> SyslogPriority {
        switch level {
        case .trace, .debug: return .debug
        case .info, .notice: return .info
        case .warning: return .warning
        case .error: return .error
        case .critical: return .critical
        }
    }

    // Lines are built as UTF-8 bytes and made a String once: appending to a String checks
    // and grows it piece by piece.

    static func logfmt(_ fields: [(String, LineValue)]) -> String {
        logfmt(fields.map { ($0.0, $0.1.logfmtText) })
    }

    static func logfmt(_ fields: [(String, String)]) -> String {
        var line: [UInt8] = []
        line.reserveCapacity(256)
        for (index, (key, value)) in fields.enumerated() {
            if index > 0 { line.append(UInt8(ascii: " ")) }
            line.append(contentsOf: key.utf8)
            line.append(UInt8(ascii: "="))
            if !value.isEmpty && value.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "=") && $0 != UInt8(ascii: "\\") }) {
                line.append(contentsOf: value.utf8)
            } else {
                line.append(UInt8(ascii: "\""))
                appendEscaped(value, to: &line)
                line.append(UInt8(ascii: "\""))
            }
        }
        return String(decoding: line, as: UTF8.self)
    }

    static func json(_ fields: [(String, String)]) -> String {
        json(fields.map { ($0.0, LineValue.text($0.1)) })
    }

    static func json(_ fields: [(String, LineValue)]) -> String {
        var line: [UInt8] = [UInt8(ascii: "{")]
        line.reserveCapacity(256)
        func appendString(_ value: String) {
            line.append(UInt8(ascii: "\""))
            appendEscaped(value, to: &line)
            line.append(UInt8(ascii: "\""))
        }
        /// `[A,B,…]`, each element written by `element`.
        func appendArray<Element>(_ elements: [Element], _ element: (Element) -> Void) {
            line.append(UInt8(ascii: "["))
            for (index, value) in elements.enumerated() {
                if index > 0 { line.append(UInt8(ascii: ",")) }
                element(value)
            }
            line.append(UInt8(ascii: "]"))
        }
        for (key, value) in fields {
            if case .text(absent) = value { continue }
            if line.count > 1 { line.append(UInt8(ascii: ",")) }
            appendString(key)
            line.append(UInt8(ascii: ":"))
            switch value {
            case .text(let text):
                if let type = AccessLog.Field(rawValue: key)?.jsonType, type != .string, isJSONNumber(text, integer: type == .integer) {
                    line.append(contentsOf: text.utf8)
                } else {
                    appendString(text)
                }
            case .list(let texts):
                appendArray(texts, appendString)
            case .certificates(let certificates):
                appendArray(certificates) { certificate in
                    line.append(contentsOf: #"{"subject":"#.utf8)
                    appendString(certificate.subject)
                    line.append(contentsOf: #","spki":"#.utf8)
                    appendString(certificate.spki)
                    line.append(UInt8(ascii: "}"))
                }
            }
        }
        line.append(UInt8(ascii: "}"))
        return String(decoding: line, as: UTF8.self)
    }

    /// The value of a field that has none (a client whose address is unknown, an upstream
    /// that negotiated no protocol).
    static let absent = "-"

    /// Whether `text` is a JSON number (RFC 8259 §6), without fraction or exponent when
    /// `integer`. A value that is not stays a string, which the typed log test catches.
    static func isJSONNumber(_ text: String, integer: Bool) -> Bool {
        var rest = Substring(text).utf8[...]
        func digits() -> Int {
            let count = rest.prefix { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }.count
            rest = rest.dropFirst(count)
            return count
        }
        if rest.first == UInt8(ascii: "-") { rest = rest.dropFirst() }
        let leadingZero = rest.first == UInt8(ascii: "0")
        let whole = digits()
        guard whole > 0, !(leadingZero && whole > 1) else { return false }
        if integer { return rest.isEmpty }
        if rest.first == UInt8(ascii: ".") {
            rest = rest.dropFirst()
            guard digits() > 0 else { return false }
        }
        if rest.first == UInt8(ascii: "e") || rest.first == UInt8(ascii: "E") {
            rest = rest.dropFirst()
            if rest.first == UInt8(ascii: "+") || rest.first == UInt8(ascii: "-") { rest = rest.dropFirst() }
            guard digits() > 0 else { return false }
        }
        return rest.isEmpty
    }

    /// Printable ASCII without a quote or backslash, the usual case: written as it is.
    static func needsNoEscaping(_ value: String) -> Bool {
        value.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }
    }

    /// `appendEscaped(_:to:)` for a line of UTF-8 bytes.
    static func appendEscaped(_ value: String, to line: inout [UInt8]) {
        if needsNoEscaping(value) {
            line.append(contentsOf: value.utf8)
        } else {
            var escaped = ""
            appendEscaped(value, to: &escaped)
            line.append(contentsOf: escaped.utf8)
        }
    }

    /// Appends `value` with quotes, backslashes and line breaks escaped.
    static func appendEscaped(_ value: String, to result: inout String) {
        if needsNoEscaping(value) {
            result += value
            return
        }
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            case " "..."~":
                // Printable ASCII: nothing to look up.
                result.unicodeScalars.append(scalar)
            default:
                // Controls, line and paragraph separators (U+0085, U+2028, U+2029) and format
                // characters (bidi overrides) are escaped: a certificate subject must not be able
                // to start a new log line or disguise one.
                switch scalar.properties.generalCategory {
                case .control, .lineSeparator, .paragraphSeparator, .format:
                    for unit in String(scalar).utf16 { result += "\\u" + unit.hex(digits: 4) }
                default:
                    result.unicodeScalars.append(scalar)
                }
            }
        }
    }
}
