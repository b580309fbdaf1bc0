import Glibc
import Foundation

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
        end = ProcessLimits.monotonicSeconds() + seconds
    }

    /// Seconds left; 0 once the deadline has passed.
    public var remaining: TimeInterval { max(0, end - ProcessLimits.monotonicSeconds()) }

    /// Waits until `socket` is ready for `events` (or has an error for the next call to report);
    /// false when the deadline passes first.
    func wait(_ socket: Int32, for events: Int16) -> Bool {
        while true {
            let left = remaining
            guard left > 0 else { return false }
            var entry = pollfd(fd: socket, events: events, revents: 0)
            // Rounded up, so that a wait never ends just short of the deadline and spins.
            let ready = poll(&entry, 1, Int32((min(left, 86_400) * 1000).rounded(.up)))
            if ready > 0 || (ready < 0 && errno != EINTR) { return true }
        }
    }

    /// `operation` ran out of this deadline's time.
    func timedOut(_ operation: String) -> TimedOut {
        TimedOut(operation: operation, seconds: seconds)
    }
}

/// A blocking exchange that did not finish within its deadline.
public struct TimedOut: Error, Sendable, CustomStringConvertible {
    /// What was under way, e.g. `the TLS handshake with 192.0.2.1:443`.
    public let operation: String
    /// The deadline's whole allowance.
    public let seconds: TimeInterval

    public var description: String { "\(operation) timed out after \(String(format: "%g", seconds)) s" }
}
