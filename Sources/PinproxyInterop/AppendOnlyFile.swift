import Glibc
import FoundationEssentials

/// A file this process appends to, opened only when it is what it claims to be: a regular file
/// owned by this process's user, with one link. A symbolic link at the path is not followed,
/// and a FIFO, a device, a directory, a hard link or another user's file is refused, so nothing
/// planted at the path receives what is written. Closed at deinit.
public final class AppendOnlyFile {
    public let path: String
    /// The file's size: what `fstat` said at open, plus what was appended since.
    public private(set) var size: Int
    private let descriptor: Int32

    /// Why the file was refused, in words that follow its path.
    public struct Refusal: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    /// Opens (creating with `mode`, less the umask) `path` for appending.
    public init(path: String, mode: mode_t = 0o640) throws(Refusal) {
        // O_NONBLOCK: opening a FIFO neither waits for a reader nor blocks a write; O_NOCTTY: a
        // terminal never becomes the controlling one.
        let descriptor = Glibc.open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, mode)
        guard descriptor >= 0 else {
            let code = errno
            throw Refusal(description: code == ELOOP ? "is a symbolic link" : "cannot be opened (\(String(cString: strerror(code))))")
        }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            let code = errno
            close(descriptor)
            throw Refusal(description: "cannot be examined (\(String(cString: strerror(code))))")
        }
        let refusal: String?
        switch info.st_mode & S_IFMT {
        case S_IFREG:
            if info.st_nlink != 1 {
                refusal = "has \(info.st_nlink) links (a hard link): only a file with one link is written"
            } else if info.st_uid != geteuid() {
                refusal = "is owned by uid \(info.st_uid), not by this process's user (uid \(geteuid()))"
            } else {
                refusal = nil
            }
        case S_IFIFO: refusal = "is a FIFO, not a regular file"
        case S_IFCHR, S_IFBLK: refusal = "is a device, not a regular file"
        case S_IFSOCK: refusal = "is a socket, not a regular file"
        default: refusal = "is not a regular file"
        }
        if let refusal {
            close(descriptor)
            throw Refusal(description: refusal)
        }
        self.path = path
        self.descriptor = descriptor
        size = Int(info.st_size)
    }

    /// Appends `bytes` in one write; nil when all were written, else why not. What a short write
    /// did write still counts in `size`.
    public func append(_ bytes: Data) -> String? {
        while true {
            let written = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                return String(cString: strerror(errno))
            }
            size += written
            return written == bytes.count ? nil : "only \(written) of \(bytes.count) bytes written"
        }
    }

    deinit {
        close(descriptor)
    }
}
