import Glibc
import PinproxyCore

extension ProcessStats {
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
