import FoundationEssentials
import PinproxyCore
import Glibc

/// Which program holds a socket, read from /proc: the process whose descriptors include
/// `socket:[INODE]`, and its `/proc/PID/exe`. Reading another user's /proc/PID/fd and exe needs
/// CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE (or being that user). Blocking file-system work:
/// never on an event loop.
public enum ProcessExecutables {
    /// What `/proc/PID/exe` names, without the ` (deleted)` the kernel appends once the file was
    /// replaced (a package upgrade) or removed.
    public static func executable(ofProcess pid: Int32) -> String? {
        guard let path = readLink("/proc/\(pid)/exe") else { return nil }
        let deleted = " (deleted)"
        return path.hasSuffix(deleted) ? String(path.dropLast(deleted.count)) : path
    }

    /// The path with every symbolic link, `.` and `..` resolved (realpath(3)); nil when it does
    /// not exist.
    public static func realPath(_ path: String) -> String? {
        guard let resolved = Glibc.realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// Whether /proc/PID/fd of another process can be opened: nil when it can, else why not
    /// (`forbidden`: EACCES or EPERM, as `ProtectProc=`, `hidepid=` or a ptrace policy answer).
    public static func fdDirectoryProblem(of pid: Int32) -> (forbidden: Bool, reason: String)? {
        let directory = open("/proc/\(pid)/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        let code = errno
        if directory >= 0 {
            close(directory)
            return nil
        }
        return (code == EACCES || code == EPERM, String(cString: strerror(code)))
    }

    /// Whether capability `bit` is in this process's effective set (`CapEff` of /proc/self/status).
    public static func hasEffectiveCapability(_ bit: Int) -> Bool {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("CapEff:") }),
              let mask = UInt64(line.dropFirst("CapEff:".count).trimmingWhitespace(), radix: 16) else { return false }
        return mask & (1 << UInt64(bit)) != 0
    }

    /// The ids of the processes /proc lists.
    public static func processes() -> [Int32] {
        guard let directory = opendir("/proc") else { return [] }
        defer { closedir(directory) }
        var pids: [Int32] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if let pid = Int32(name), pid > 0 { pids.append(pid) }
        }
        return pids
    }

    /// The owner of /proc/PID: the process's effective uid while it is dumpable.
    public static func owner(of pid: Int32) -> UInt32? {
        var info = stat()
        return stat("/proc/\(pid)", &info) == 0 ? UInt32(info.st_uid) : nil
    }

    /// Whether a descriptor of `pid` links to `target` (`socket:[INODE]`).
    public static func holds(_ pid: Int32, _ target: [UInt8]) -> Bool {
        let fdDirectory = open("/proc/\(pid)/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fdDirectory >= 0, let directory = fdopendir(fdDirectory) else {
            if fdDirectory >= 0 { close(fdDirectory) }
            return false
        }
        defer { closedir(directory) }
        var link = [CChar](repeating: 0, count: 64)
        let capacity = link.count
        while let entry = readdir(directory) {
            let length = withUnsafePointer(to: entry.pointee.d_name) { name in
                name.withMemoryRebound(to: CChar.self, capacity: MemoryLayout.size(ofValue: entry.pointee.d_name)) { name in
                    readlinkat(fdDirectory, name, &link, capacity)
                }
            }
            if length == target.count && link[..<length].elementsEqual(target, by: { UInt8(bitPattern: $0) == $1 }) { return true }
        }
        return false
    }

    private static func readLink(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlink(path, &buffer, buffer.count - 1)
        guard length > 0 else { return nil }
        return String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
