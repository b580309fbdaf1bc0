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

    /// The file at `path`, opened for reading; throws the system's words when it cannot be.
    public convenience init(path: String) throws(ReadFailure) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw ReadFailure(errno) }
        self.init(fd: fd, owned: true)
    }

    /// Why a file could not be opened or read, in the system's words (`Is a directory`).
    public struct ReadFailure: Error, CustomStringConvertible {
        public let description: String
        init(_ code: Int32) { description = String(cString: strerror(code)) }
    }

    deinit {
        if owned { close(fd) }
    }

    /// The next bytes, at most `count`; empty at the end of the input. A read error throws: it
    /// is not the end of the input.
    public func read(upTo count: Int) throws(ReadFailure) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: count)
        while true {
            let got = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, count) }
            if got < 0 {
                if errno == EINTR { continue }
                throw ReadFailure(errno)
            }
            return Array(buffer.prefix(got))
        }
    }
}
