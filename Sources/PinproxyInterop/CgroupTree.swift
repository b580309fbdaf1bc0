import Glibc
import PinproxyCore

/// The cgroup v2 hierarchy as /sys/fs/cgroup shows it: where it is mounted, and the id of each
/// cgroup (the inode of its directory, what `INET_DIAG_CGROUP_ID` reports). Blocking
/// file-system work: never on an event loop.
public enum CgroupTree {
    /// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified`
    /// on a hybrid system), from /proc/self/mountinfo; nil when it is not mounted.
    public static func root() -> String? {
        guard let text = ProcFile.readText("/proc/self/mountinfo", limit: 4 << 20) else { return nil }
        return Mountinfo.cgroup2MountPoint(in: text)
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
}
