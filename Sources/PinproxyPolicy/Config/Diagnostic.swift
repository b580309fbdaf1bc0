/// A config problem with its place: printed `FILE:LINE: message` (errors) or
/// `FILE:LINE: warning: message`.
public struct Diagnostic: Sendable, Equatable, CustomStringConvertible {
    public enum Severity: Sendable, Equatable {
        case error, warning
    }

    public let file: String
    public let line: Int
    public let severity: Severity
    public let message: String

    public init(file: String, line: Int, severity: Severity, message: String) {
        self.file = file
        self.line = line
        self.severity = severity
        self.message = message
    }

    /// `FILE:LINE: message`; `FILE: message` when the problem has no line (an unreadable file).
    public var description: String {
        (line > 0 ? "\(file):\(line): " : "\(file): ") + (severity == .warning ? "warning: " : "") + message
    }
}

/// A config that cannot be used, with every problem found.
public struct ConfigError: Error, Sendable, CustomStringConvertible {
    /// Every error, in file order; warnings found on the way are not included.
    public let diagnostics: [Diagnostic]

    public init(diagnostics: [Diagnostic]) {
        self.diagnostics = diagnostics
    }

    public var description: String { diagnostics.map(\.description).joined(separator: "\n") }
}
