import FoundationEssentials

/// When a blocking exchange must be over, on the monotonic clock. Every wait in the exchange
/// gets only the time left, so no step (a slow connect, a handshake that trickles in a byte at
/// a time) can stretch the whole past it.
public struct Deadline: Sendable {
    /// The whole allowance, in seconds.
    public let seconds: TimeInterval
    private let end: TimeInterval

    /// `seconds` from now.
    public init(after seconds: TimeInterval) {
        self.seconds = seconds
        end = Self.now() + seconds
    }

    /// Seconds left; 0 once the deadline has passed.
    public var remaining: TimeInterval { max(0, end - Self.now()) }

    /// Seconds since the first deadline, on `SuspendingClock` (CLOCK_MONOTONIC on Linux):
    /// unaffected by changes to the wall clock.
    private static func now() -> TimeInterval {
        let elapsed = origin.duration(to: .now).components
        return TimeInterval(elapsed.seconds) + TimeInterval(elapsed.attoseconds) / 1e18
    }

    private static let origin = SuspendingClock.now

    /// `operation` ran out of this deadline's time.
    public func timedOut(_ operation: String) -> TimedOut {
        TimedOut(operation: operation, seconds: seconds)
    }
}

/// A blocking exchange that did not finish within its deadline.
public struct TimedOut: Error, Sendable, CustomStringConvertible {
    /// What was under way, e.g. `the TLS handshake with 192.0.2.1:443`.
    public let operation: String
    /// The deadline's whole allowance.
    public let seconds: TimeInterval

    public var description: String { "\(operation) timed out after \(seconds.secondsText) s" }
}
