import Glibc

/// A value shared between threads, behind a pthread mutex, which ThreadSanitizer understands. The
/// standard library's `Synchronization.Mutex` waits on a futex on Linux, which this toolchain's
/// ThreadSanitizer does not see: every access under it reads as a race there, which would drown
/// real ones (`scripts/test --sanitize thread`). The mutex lives at a fixed address of its own
/// (a pthread mutex must not move), allocated and freed here only.
public final class Locked<Value>: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private var value: Value

    public init(_ value: Value) {
        self.value = value
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the value while holding the lock.
    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
