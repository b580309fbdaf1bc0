import FoundationEssentials

/// At most `perHost` admissions per host and `overall` for all hosts together per minute (fixed
/// one-minute windows). A host refused by either limit uses up neither.
struct RateLimiter {
    private var overallWindow: (start: TimeInterval, count: Int) = (-.infinity, 0)
    private var windows: [String: (start: TimeInterval, count: Int)] = [:]
    /// The next pruning of ended windows, when this many hosts have one.
    private var pruneAt = 10_000

    mutating func admit(_ host: String, perHost: Int, overall: Int, now: TimeInterval) -> Bool {
        if now - overallWindow.start >= 60 { overallWindow = (now, 0) }
        guard overallWindow.count < overall else { return false }
        if windows.count > pruneAt {
            windows = windows.filter { now - $0.value.start < 60 }
            pruneAt = max(10_000, 2 * windows.count)
        }
        var window = windows[host] ?? (now, 0)
        if now - window.start >= 60 { window = (now, 0) }
        guard window.count < perHost else { return false }
        window.count += 1
        windows[host] = window
        overallWindow.count += 1
        return true
    }
}
