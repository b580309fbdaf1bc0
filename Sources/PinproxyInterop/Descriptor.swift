import Glibc
// Not used directly. CPinproxyShims.h includes <sys/socket.h>: when a compile job of this module
// has loaded that C module, it owns the `SOCK_STREAM` constant and Glibc no longer provides it,
// so a file naming `SOCK_STREAM` must import it too (or the build fails depending on batching).
import CPinproxyShims
import PinproxyCore

/// Calls on a descriptor this process was handed rather than opened (socket activation, the
/// journal's stream): each reports what the kernel said and decides nothing.
public enum Descriptor {
    /// The `fstat` device and inode of `fd`, and whether it is a socket.
    public static func status(of fd: Int32) throws(DescriptorError) -> (device: UInt64, inode: UInt64, isSocket: Bool) {
        var status = stat()
        guard fstat(fd, &status) == 0 else { throw failure("fstat") }
        return (UInt64(status.st_dev), UInt64(status.st_ino), status.st_mode & S_IFMT == S_IFSOCK)
    }

    /// Whether socket `fd` is a `SOCK_STREAM` socket that listens; false when either cannot be read.
    public static func isListeningStream(_ fd: Int32) -> Bool {
        intOption(fd, SO_TYPE) == Int32(SOCK_STREAM.rawValue) && intOption(fd, SO_ACCEPTCONN) == 1
    }

    /// Sets `FD_CLOEXEC` on `fd`, keeping its other descriptor flags.
    public static func setCloseOnExec(_ fd: Int32) throws(DescriptorError) {
        let flags = fcntl(fd, F_GETFD)
        guard flags >= 0 else { throw failure("fcntl(F_GETFD)") }
        if flags & FD_CLOEXEC != 0 { return }
        guard fcntl(fd, F_SETFD, flags | FD_CLOEXEC) == 0 else {
            throw .system(call: "fcntl(F_SETFD)", errno: errno)
        }
    }

    /// An `SOL_SOCKET` integer option, or nil when it cannot be read.
    private static func intOption(_ fd: Int32, _ option: Int32) -> Int32? {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, option, &value, &length) == 0 else { return nil }
        return value
    }

    private static func failure(_ call: String) -> DescriptorError {
        errno == EBADF ? .notOpen : .system(call: call, errno: errno)
    }
}
