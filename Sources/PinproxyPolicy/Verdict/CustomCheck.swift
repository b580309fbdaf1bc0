/// The answer of an entry's `verify_command`, an operator's own check run after the built-in
/// ones passed. It can only refuse more, never allow what the built-in checks refused.
public struct CustomCheckResult: Sendable, Equatable {
    public let passed: Bool
    /// Why it failed: the exit status or timeout, and the first line the command wrote to stderr.
    public let detail: String

    public init(passed: Bool, detail: String) {
        self.passed = passed
        self.detail = detail
    }
}
