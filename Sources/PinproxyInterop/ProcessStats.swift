import Glibc

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

    /// Reads `/proc/self/stat`, `/proc/stat` (boot time), `/proc/self/fd` and the open-file
    /// limit; nil when `/proc` cannot be read or says something unexpected.
    public static func current() -> ProcessStats? {
        guard let stat = try? FilePathBytes("/proc/self/stat").read(.processStatus),
              let fields = statFields(stat),
              let boot = try? FilePathBytes("/proc/stat").read(.processStatus),
              let bootTime = bootTime(boot),
              let openDescriptors = countOpenDescriptors() else { return nil }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        let pageSize = Double(sysconf(Int32(_SC_PAGESIZE)))
        guard ticks > 0, pageSize > 0 else { return nil }
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return nil }
        return ProcessStats(cpuSeconds: Double(fields.utime + fields.stime) / ticks,
                            residentMemoryBytes: Double(fields.rss) * pageSize,
                            virtualMemoryBytes: Double(fields.vsize),
                            openDescriptors: openDescriptors,
                            maxDescriptors: Int(clamping: limit.rlim_cur),
                            startTimeSeconds: Double(bootTime) + Double(fields.startTicks) / ticks)
    }

    /// The fields of `/proc/self/stat` these metrics use (proc(5)): utime (14), stime (15),
    /// starttime (22), vsize (23) and rss (24, in pages). The command name (2) sits in
    /// parentheses and may itself hold spaces and parentheses, so fields count from the last `)`.
    static func statFields(_ text: [UInt8]) -> (utime: UInt64, stime: UInt64, startTicks: UInt64, vsize: UInt64, rss: Int64)? {
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
    static func bootTime(_ text: [UInt8]) -> UInt64? {
        for line in text.split(separator: UInt8(ascii: "\n")) where line.starts(with: Array("btime ".utf8)) {
            return String(decoding: line.dropFirst(6), as: UTF8.self).split(separator: " ").first.flatMap { UInt64($0) }
        }
        return nil
    }

    /// The entries of `/proc/self/fd`, less the one that lists them.
    static func countOpenDescriptors() -> Int? {
        guard let directory = opendir("/proc/self/fd") else { return nil }
        defer { closedir(directory) }
        let own = dirfd(directory)
        var count = 0
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard let descriptor = Int32(name), descriptor != own else { continue }
            count += 1
        }
        return count
    }
}
