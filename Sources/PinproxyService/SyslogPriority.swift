import FoundationEssentials
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

    /// `line` with `priority` in front when enabled. A text of several lines gets the prefix
    /// on each, since journald reads one per line.
    public func format(_ line: String, priority: SyslogPriority) -> String {
        guard enabled else { return line }
        guard line.contains(where: \.isNewline) else { return priority.prefix + line }
        return line.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline)
            .map { $0.isEmpty ? "" : priority.prefix + $0 }
            .joined(separator: "\n")
    }
}
