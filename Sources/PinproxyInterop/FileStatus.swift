import Glibc
import PinproxyCore

/// What `stat` says of a path (symbolic links followed): whether it is a directory, its
/// owner, and its permission bits.
public struct FileStatus: Sendable, Equatable {
    public let isDirectory: Bool
    public let owner: uid_t
    /// The permission bits (`mode & 0o777`).
    public let permissions: UInt32
}

extension FilePathBytes {
    /// The path's status; a path that does not exist throws an error whose `isNotFound` is set.
    public func status() throws(SystemError) -> FileStatus {
        var info = stat()
        guard withCPath({ stat($0, &info) }) == 0 else { throw SystemError("stat", errno) }
        return FileStatus(isDirectory: info.st_mode & S_IFMT == S_IFDIR, owner: info.st_uid, permissions: UInt32(info.st_mode & 0o777))
    }

    /// Sets the path's permission bits (`chmod`).
    public func setPermissions(_ mode: UInt32) throws(SystemError) {
        guard withCPath({ chmod($0, mode_t(mode)) }) == 0 else { throw SystemError("chmod", errno) }
    }
}
