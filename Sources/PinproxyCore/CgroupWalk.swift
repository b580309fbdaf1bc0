/// What one walk of the cgroup v2 hierarchy saw (`CgroupTree.walk` in Interop reads the
/// directories; `SystemUnit` in Policy judges what it saw): each cgroup's id (the inode of its
/// directory, what `INET_DIAG_CGROUP_ID` reports) and path relative to the hierarchy's root, in
/// the order met, and how the walk ended.
public struct CgroupWalk: Sendable {
    /// How a walk ended.
    public enum End: Sendable, Equatable {
        /// It met the cgroup it was looking for (the last one listed).
        case found
        /// It saw every cgroup it could.
        case complete
        /// It stopped at its bound of this many cgroups, with more left.
        case bound(Int)
    }

    /// A cgroup the walk could not list, so that cgroups below it may have been missed.
    public enum Gap: Sendable, Equatable, CustomStringConvertible {
        /// It was removed between being listed and being read.
        case vanished(FilePathBytes)
        /// It could not be read (`error`: a longer path than the kernel takes, say).
        case unreadable(FilePathBytes, error: String)

        public var description: String {
            switch self {
            case .vanished(let path): return "cgroup \(path) vanished while the hierarchy was read"
            case .unreadable(let path, let error): return "cgroup \(path) could not be read (\(error))"
            }
        }
    }

    public var cgroups: [(id: UInt64, path: FilePathBytes)]
    public var end: End
    /// The first directory the walk could not list, if any.
    public var gap: Gap?

    public init(cgroups: [(id: UInt64, path: FilePathBytes)] = [], end: End = .complete, gap: Gap? = nil) {
        self.cgroups = cgroups
        self.end = end
        self.gap = gap
    }
}
