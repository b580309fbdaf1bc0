import Glibc
import PinproxyCore

/// A file or standard input read in chunks with read(2), for input of any length (`suggest`
/// reads whole decision logs).
public final class ChunkReader {
    private let fd: Int32
    private let owned: Bool

    private init(fd: Int32, owned: Bool) {
        self.fd = fd
        self.owned = owned
    }

    /// Standard input (left open).
    public static var standardInput: ChunkReader { ChunkReader(fd: STDIN_FILENO, owned: false) }

    /// The file at `path`, opened for reading; nil when it cannot be opened.
    public convenience init?(path: String) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        self.init(fd: fd, owned: true)
    }

    deinit {
        if owned { close(fd) }
    }

    /// The next bytes, at most `count`; empty at the end of the input or on a read error.
    public func read(upTo count: Int) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: count)
        while true {
            let got = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, count) }
            if got < 0 && errno == EINTR { continue }
            return got > 0 ? Array(buffer.prefix(got)) : []
        }
    }
}
