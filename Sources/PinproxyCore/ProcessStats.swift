/// This process's CPU time, memory, descriptors and start time, as Linux reports them in
/// `/proc/self` now: what Prometheus's standard `process_*` metrics say. Each read is a few
/// small in-memory files, no waiting.
public struct ProcessStats: Sendable, Equatable {
    /// User plus system CPU time, in seconds.
    public let cpuSeconds: Double
    public let residentMemoryBytes: Double
    public let virtualMemoryBytes: Double
    public let openDescriptors: Int
    /// The soft limit on open files (`RLIMIT_NOFILE`).
    public let maxDescriptors: Int
    /// When the process started, in seconds since 1970.
    public let startTimeSeconds: Double

    public init(cpuSeconds: Double, residentMemoryBytes: Double, virtualMemoryBytes: Double, openDescriptors: Int,
                maxDescriptors: Int, startTimeSeconds: Double) {
        self.cpuSeconds = cpuSeconds
        self.residentMemoryBytes = residentMemoryBytes
        self.virtualMemoryBytes = virtualMemoryBytes
        self.openDescriptors = openDescriptors
        self.maxDescriptors = maxDescriptors
        self.startTimeSeconds = startTimeSeconds
    }

    /// The fields of `/proc/self/stat` these metrics use (proc(5)): utime (14), stime (15),
    /// starttime (22), vsize (23) and rss (24, in pages). The command name (2) sits in
    /// parentheses and may itself hold spaces and parentheses, so fields count from the last `)`.
    public static func statFields(_ text: [UInt8]) -> (utime: UInt64, stime: UInt64, startTicks: UInt64, vsize: UInt64, rss: Int64)? {
        guard let close = text.lastIndex(of: UInt8(ascii: ")")) else { return nil }
        let fields = text[(close + 1)...].split(whereSeparator: { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\n") })
        // fields[0] is field 3 (state).
        guard fields.count >= 22 else { return nil }
        func number<T: FixedWidthInteger>(_ field: Int) -> T? { T(String(decoding: fields[field - 3], as: UTF8.self)) }
        guard let utime: UInt64 = number(14), let stime: UInt64 = number(15), let start: UInt64 = number(22),
              let vsize: UInt64 = number(23), let rss: Int64 = number(24) else { return nil }
        return (utime, stime, start, vsize, max(0, rss))
    }

    /// `btime` of `/proc/stat`: the boot time in seconds since 1970.
    public static func bootTime(_ text: [UInt8]) -> UInt64? {
        for line in text.split(separator: UInt8(ascii: "\n")) where line.starts(with: Array("btime ".utf8)) {
            return String(decoding: line.dropFirst(6), as: UTF8.self).split(separator: " ").first.flatMap { UInt64($0) }
        }
        return nil
    }
}
