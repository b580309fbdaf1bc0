import Foundation
import PinproxyInterop

/// A syslog priority (RFC 5424 severity), as journald reads it from a `<N>` line prefix.
public enum SyslogPriority: Int, Sendable, CaseIterable, Comparable {
    case emergency = 0
    case alert = 1
    case critical = 2
    case error = 3
    case warning = 4
    case notice = 5
    case info = 6
    case debug = 7

    /// The `<N>` prefix journald strips and records as `PRIORITY=N`.
    public var prefix: String { "<\(rawValue)>" }

    public static func < (lhs: SyslogPriority, rhs: SyslogPriority) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// What a log line reports; each kind has one priority.
public enum LogEventKind: String, Sendable, CaseIterable {
    /// A connection allowed (including `allow-insecure`), and a closed tunnel's summary.
    case allowed
    /// A connection refused.
    case refused
    /// An entry with `enforce = false` would have refused: allowed, and reported.
    case wouldRefuse
    /// Lifecycle facts: started, reloaded, stopping.
    case lifecycle
    /// The daemon itself failed at something: a reload that kept the old config, a listener
    /// that could not be bound, a notify datagram that could not be sent.
    case daemonError

    /// `<4>` refusals and would-refuse, `<6>` allowed, `<5>` lifecycle, `<3>` daemon errors.
    public var priority: SyslogPriority {
        switch self {
        case .refused, .wouldRefuse: return .warning
        case .allowed: return .info
        case .lifecycle: return .notice
        case .daemonError: return .error
        }
    }
}

/// Adds `<N>` priority prefixes to log lines when, and only when, standard error is journald's
/// stream (`JOURNAL_STREAM` matches `fstat(2)`); on a terminal or in a file lines stay plain.
///
/// Immutable and `Sendable`: decide once at startup and share it with every event loop.
public struct SyslogPrefixer: Sendable {
    /// Whether lines get a prefix.
    public let enabled: Bool

    public init(enabled: Bool) {
        self.enabled = enabled
    }

    /// Enabled when this process's standard error goes to journald, by `environment`.
    public static func detect(
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> SyslogPrefixer {
        SyslogPrefixer(enabled: JournalStream.stderrIsJournal(environment: environment))
    }

    /// `line` with the priority of `kind` in front when enabled. A text of several lines gets
    /// the prefix on each, since journald reads one per line.
    public func format(_ line: String, kind: LogEventKind) -> String {
        format(line, priority: kind.priority)
    }

    /// `line` with `priority` in front when enabled.
    public func format(_ line: String, priority: SyslogPriority) -> String {
        guard enabled else { return line }
        guard line.contains(where: \.isNewline) else { return priority.prefix + line }
        return line.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline)
            .map { $0.isEmpty ? "" : priority.prefix + $0 }
            .joined(separator: "\n")
    }
}
