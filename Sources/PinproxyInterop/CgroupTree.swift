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

    /// Walks the hierarchy mounted at `root` (or any directory tree laid out like one), depth
    /// first and at any depth: the subtree at `first` (such as `/system.slice`, relative to
    /// `root`), then every other cgroup from the root down, until it meets cgroup `target` or
    /// has seen `limit` cgroups (its only early end). A directory it cannot list (removed
    /// meanwhile, a path longer than the kernel takes) is skipped and the first such is
    /// reported, never the end of the walk. A `first` that does not exist (a host with no
    /// `/system.slice`) is no gap: the rest of the hierarchy is walked as ever. Names are kept
    /// as the bytes they are.
    /// `beforeListing` is called with each directory just before it is listed (tests remove
    /// directories there).
    public static func walk(root: String, first: String, until target: UInt64, limit: Int,
                            beforeListing: ((FilePathBytes) -> Void)? = nil) -> CgroupWalk {
        var walk = CgroupWalk()
        let rootBytes = Array(root.utf8)
        let start = FilePathBytes(first)

        /// Records a cgroup; true when the walk ends there.
        func record(_ id: UInt64, _ path: FilePathBytes) -> Bool {
            walk.cgroups.append((id, path))
            if id == target { walk.end = .found; return true }
            if walk.cgroups.count >= limit { walk.end = .bound(limit); return true }
            return false
        }

        func noteGap(_ path: FilePathBytes, _ code: Int32) {
            guard walk.gap == nil else { return }
            walk.gap = code == ENOENT ? .vanished(path) : .unreadable(path, error: String(cString: strerror(code)))
        }

        /// Lists `top` and everything below it except `skipping`; true when the walk ends.
        /// A missing `top` is a gap only when `mustExist`.
        func descend(from top: FilePathBytes, skipping: FilePathBytes?, mustExist: Bool) -> Bool {
            let topPath = FilePathBytes(bytes: rootBytes + top.bytes)
            var info = stat()
            guard topPath.withCPath({ stat($0, &info) }) == 0 else {
                let code = errno
                if mustExist || code != ENOENT { noteGap(top, code) }
                return false
            }
            if record(UInt64(info.st_ino), top) { return true }
            var pending = [top]
            while let directory = pending.popLast() {
                beforeListing?(directory)
                let path = FilePathBytes(bytes: rootBytes + directory.bytes)
                guard let handle = path.withCPath({ opendir($0) }) else {
                    noteGap(directory, errno)
                    continue
                }
                defer { closedir(handle) }
                while true {
                    errno = 0
                    guard let entry = readdir(handle) else {
                        if errno != 0 { noteGap(directory, errno) }
                        break
                    }
                    let name = withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix { $0 != 0 }) }
                    guard name != [UInt8(ascii: ".")], name != [UInt8(ascii: "."), UInt8(ascii: ".")] else { continue }
                    let child = directory.appending(name)
                    switch Int32(entry.pointee.d_type) {
                    case Int32(DT_DIR): break
                    case Int32(DT_UNKNOWN):
                        var childInfo = stat()
                        let full = FilePathBytes(bytes: rootBytes + child.bytes)
                        guard full.withCPath({ lstat($0, &childInfo) }) == 0, childInfo.st_mode & S_IFMT == S_IFDIR else { continue }
                    default: continue
                    }
                    if child == skipping { continue }
                    if record(UInt64(entry.pointee.d_ino), child) { return true }
                    pending.append(child)
                }
            }
            return false
        }

        let whole = FilePathBytes("/")
        if descend(from: start, skipping: nil, mustExist: start == whole) { return walk }
        if start == whole { return walk }
        _ = descend(from: whole, skipping: start, mustExist: true)
        return walk
    }
}
