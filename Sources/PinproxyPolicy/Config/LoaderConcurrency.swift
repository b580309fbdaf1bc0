import Dispatch
import PinproxyCore

/// A value computed on another thread while the caller goes on.
public final class InBackground<Value>: @unchecked Sendable {
    private var value: Value?
    private let done = DispatchGroup()

    public init(_ work: @escaping @Sendable () -> Value) {
        done.enter()
        DispatchQueue.global().async { [self] in
            value = work()
            done.leave()
        }
    }

    /// Waits for the value.
    public func result() -> Value {
        done.wait()
        return value!  // Unreachable nil: the work stores the value before `leave`, which `wait` waited for.
    }
}

/// Drops `value` on another core, so that freeing what a large config built does not hold up
/// the caller. The caller must hold no other reference to what it owns.
func releaseInBackground<Value>(_ value: consuming Value) {
    let held = UncheckedSendable(value: consume value)
    DispatchQueue.global(qos: .utility).async { withExtendedLifetime(held) {} }
}

/// Hands values that are only read, or owned by one task at a time, to other threads.
struct UncheckedSendable<Value>: @unchecked Sendable {
    let value: Value
}

/// One result per slice of a list, each stored by the task that made it.
final class SliceResults<Result>: @unchecked Sendable {
    private let slots: Locked<[Result?]>

    init(count: Int) {
        slots = Locked(Array(repeating: nil, count: count))
    }

    func store(_ slice: Int, _ result: Result) {
        slots.withLock { $0[slice] = result }
    }

    /// Every slot once all tasks have stored theirs; nil while one has not.
    var all: [Result]? {
        slots.withLock { slots in
            let stored = slots.compactMap { $0 }
            return stored.count == slots.count ? stored : nil
        }
    }
}
