import Foundation

/// A value shared between threads, behind a lock ThreadSanitizer understands (`NSLock`, a pthread
/// mutex). The standard library's `Synchronization.Mutex` waits on a futex on Linux, which this
/// toolchain's ThreadSanitizer does not see: every access under it reads as a race there, which
/// would drown real ones (`scripts/test --sanitize thread`).
public final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    public init(_ value: Value) {
        self.value = value
    }

    /// Runs `body` with the value while holding the lock.
    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
