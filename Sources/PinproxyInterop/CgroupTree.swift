import Glibc

/// The cgroup v2 hierarchy as /sys/fs/cgroup shows it: where it is mounted, and the id of each
/// cgroup (the inode of its directory, what `INET_DIAG_CGROUP_ID` reports). Blocking
/// file-system work: never on an event loop.
public enum CgroupTree {
    /// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified`
    /// on a hybrid system), from /proc/self/mountinfo; nil when it is not mounted.
    public static func root() -> String? {
        guard let text = readText("/proc/self/mountinfo") else { return nil }
        for line in text.split(separator: "\n") {
            // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS... - FSTYPE SOURCE SUPEROPTIONS
            guard let separator = line.range(of: " - ") else { continue }
            guard line[separator.upperBound...].hasPrefix("cgroup2 ") else { continue }
            let fields = line[..<separator.lowerBound].split(separator: " ")
            if fields.count >= 5 { return unescape(fields[4]) }
        }
        return nil
    }

    /// Every cgroup at or below `path` (relative to `root`, such as `/system.slice`), at most
    /// `depth` levels below it and `limit` cgroups in all, each with its id and its path
    /// relative to `root`.
    public static func cgroups(under path: String, root: String, depth: Int, limit: Int) -> [(id: UInt64, path: String)] {
        var info = stat()
        guard stat(root + path, &info) == 0 else { return [] }
        var found = [(id: UInt64(info.st_ino), path: path)]
        var pending = [(path: path, depth: 0)]
        while let (directory, level) = pending.popLast(), level < depth {
            guard let handle = opendir(root + directory) else { continue }
            defer { closedir(handle) }
            while let entry = readdir(handle), found.count < limit {
                guard entry.pointee.d_type == UInt8(DT_DIR) else { continue }
                let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                guard name != ".", name != ".." else { continue }
                let child = directory == "/" ? "/" + name : directory + "/" + name
                found.append((UInt64(entry.pointee.d_ino), child))
                pending.append((child, level + 1))
            }
        }
        return found
    }

    /// mountinfo writes a space, tab, newline and backslash in a path as `\040`, `\011`, `\012`, `\134`.
    private static func unescape(_ field: Substring) -> String {
        var bytes: [UInt8] = []
        var rest = Array(field.utf8)[...]
        while let byte = rest.popFirst() {
            if byte == UInt8(ascii: "\\"), rest.count >= 3, let value = UInt8(String(decoding: rest.prefix(3), as: UTF8.self), radix: 8) {
                bytes.append(value)
                rest = rest.dropFirst(3)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func readText(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let count = read(fd, &chunk, chunk.count)
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { return nil }
            if count == 0 { return String(decoding: bytes, as: UTF8.self) }
            bytes += chunk[..<count]
            if bytes.count > 4 << 20 { return nil }
        }
    }
}
