/// A TCP socket as the kernel's socket diagnostics report it: whose it is, whether a file
/// still refers to it, and the cgroup it was created in.
public struct SocketOwner: Sendable, Equatable {
    /// The TCP state (`TCP_ESTABLISHED` is 1).
    public let state: UInt8
    /// The user that created the socket.
    public let uid: UInt32
    /// The socket's inode; 0 once no descriptor refers to it (its process closed it or exited).
    public let inode: UInt32
    /// The cgroup v2 id of the socket (`INET_DIAG_CGROUP_ID`); nil when the kernel sent none.
    public let cgroupID: UInt64?

    public init(state: UInt8, uid: UInt32, inode: UInt32, cgroupID: UInt64?) {
        self.state = state
        self.uid = uid
        self.inode = inode
        self.cgroupID = cgroupID
    }

    public static let established: UInt8 = 1

    public var isEstablished: Bool { state == Self.established }
}
