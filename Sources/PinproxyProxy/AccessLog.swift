import Foundation
import Logging
import PinproxyInterop
import PinproxyPolicy
import PinproxyService

/// pinproxy's log: one line per event on stderr, as logfmt or JSON, with constant field
/// names. Connection decisions are logged once, by `ClientConnection.logDecision`.
public struct AccessLog: Sendable {
    /// Field names, in the order lines print them.
    public enum Field: String, CaseIterable, Sendable {
        case time, level, event, client, host, port, entry, outcome, reason, status, alpn, detail, chain
        case bytesUp = "bytes_up", bytesDown = "bytes_down", duration
        case address, config, error, entries, warning
    }

    private let logger: Logger

    /// A log writing `format` lines to stderr.
    public init(format: ProxySettings.LogFormat) {
        let prefixer = SyslogPrefixer.detect()
        logger = Logger(label: "pinproxy") { _ in LineLogHandler(format: format, prefixer: prefixer) }
    }

    /// Writes one event line.
    public func emit(_ level: Logger.Level, _ event: String, _ fields: [(Field, String)]) {
        var metadata: Logger.Metadata = [:]
        for (field, value) in fields { metadata[field.rawValue] = .string(value) }
        logger.log(level: level, Logger.Message(stringLiteral: event), metadata: metadata)
    }
}

/// Formats swift-log records as single logfmt or JSON lines and writes each with one write.
/// Under journald each line starts with its syslog priority: `<6>` allowed connections and
/// lifecycle, `<4>` refusals and report-only, `<3>` daemon errors.
struct LineLogHandler: LogHandler {
    let format: ProxySettings.LogFormat
    let prefixer: SyslogPrefixer
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .info

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var fields: [(String, String)] = [("time", rfc3339Milliseconds(Date())), ("level", Self.levelName(event.level)), ("event", event.message.description)]
        let values = metadata.merging(event.metadata ?? [:]) { $1 }
        let rank = Self.fieldRank
        for key in values.keys.sorted(by: { (rank[$0] ?? rank.count, $0) < (rank[$1] ?? rank.count, $1) }) {
            fields.append((key, "\(values[key]!)"))
        }
        StandardError.writeLine(prefixer.format(format == .json ? Self.json(fields) : Self.logfmt(fields), priority: Self.priority(event.level)))
    }

    /// Each field's position in a line.
    static let fieldRank = Dictionary(uniqueKeysWithValues: AccessLog.Field.allCases.enumerated().map { ($0.element.rawValue, $0.offset) })

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

    static func logfmt(_ fields: [(String, String)]) -> String {
        fields.map { key, value in
            let bare = !value.isEmpty && value.unicodeScalars.allSatisfy { $0.value > 0x20 && $0.value < 0x7F && $0 != "\"" && $0 != "=" && $0 != "\\" }
            return bare ? "\(key)=\(value)" : "\(key)=\"\(escape(value))\""
        }.joined(separator: " ")
    }

    static func json(_ fields: [(String, String)]) -> String {
        "{" + fields.map { "\"\($0.0)\":\"\(escape($0.1))\"" }.joined(separator: ",") + "}"
    }

    static func escape(_ value: String) -> String {
        var result = ""
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
                    for unit in String(scalar).utf16 { result += String(format: "\\u%04x", unit) }
                default:
                    result.unicodeScalars.append(scalar)
                }
            }
        }
        return result
    }
}

/// `2026-01-31T12:00:00.123Z`.
func rfc3339Milliseconds(_ date: Date) -> String {
    timestampStyle.format(date)
}

private let timestampStyle = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
