import Glibc
import FoundationEssentials
import CPinproxyShims

/// The process's open-file limit and a monotonic clock.
public enum ProcessLimits {
    /// Raises the soft limit on open files to the hard limit; returns the soft limit now in force.
    @discardableResult
    public static func raiseOpenFileLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1024 }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        return Int(clamping: limit.rlim_cur)  // RLIM_INFINITY clamps to Int.max
    }

    /// For a command that exits once its work is done (`check`): the heap grows 64 MiB at a
    /// time and is never trimmed, which spares most of the page faults and system calls of
    /// loading a large config. A daemon must not: its memory would never go back.
    public static func keepHeapUntilExit() {
        _ = mallopt(M_TRIM_THRESHOLD, Int32.max)
        _ = mallopt(M_TOP_PAD, 64 << 20)
    }

    /// Seconds on CLOCK_MONOTONIC: unaffected by changes to the wall clock.
    public static func monotonicSeconds() -> TimeInterval {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return TimeInterval(now.tv_sec) + TimeInterval(now.tv_nsec) / 1_000_000_000
    }

    /// `CLOCK_MONOTONIC` in microseconds: the clock of `MONOTONIC_USEC=` in a systemd reload
    /// notification.
    public static func monotonicMicroseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1_000
    }
}
