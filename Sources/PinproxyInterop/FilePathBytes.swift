import Glibc
import FoundationEssentials
import PinproxyCore

extension FilePathBytes {
    /// The argument of this process's command line that Swift decoded as `argument`, with the
    /// bytes it had: `CommandLine.arguments` replaces bytes that are not UTF-8, and a file
    /// named with them could not be opened by that text.
    public static func commandLineArgument(_ argument: String) -> FilePathBytes {
        for index in 0..<Int(CommandLine.argc) {
            guard let pointer = CommandLine.unsafeArgv[index] else { continue }
            let raw = Array(UnsafeBufferPointer(start: UnsafeRawPointer(pointer).assumingMemoryBound(to: UInt8.self),
                                                count: strlen(pointer)))
            if String(decoding: raw, as: UTF8.self) == argument { return FilePathBytes(bytes: raw) }
        }
        return FilePathBytes(argument)
    }

    /// What `stat` says the path is; nil when it does not exist (or cannot be reached).
    public var kind: Kind? {
        var info = stat()
        guard withCPath({ stat($0, &info) }) == 0 else { return nil }
        return (info.st_mode & S_IFMT) == S_IFDIR ? .directory : .file
    }

    /// The whole file, read without ever holding more than `kind`'s cap of it.
    public func read(_ kind: FileKind) throws(FileReadError) -> [UInt8] {
        let limit = kind.readLimit
        let descriptor = withCPath { open($0, O_RDONLY | O_CLOEXEC) }
        guard descriptor >= 0 else { throw FileReadError(errno: errno) }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw FileReadError(errno: errno) }
        if (info.st_mode & S_IFMT) == S_IFDIR { throw FileReadError(errno: EISDIR) }
        if (info.st_mode & S_IFMT) == S_IFREG && Int64(info.st_size) > Int64(limit) { throw .tooLarge(kind) }
        var result: [UInt8] = []
        if (info.st_mode & S_IFMT) == S_IFREG { result.reserveCapacity(Int(info.st_size)) }
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw FileReadError(errno: errno)
            }
            if count == 0 { return result }
            // A file that grows while read, or one that is not a regular file, stops at the limit.
            guard result.count + count <= limit else { throw .tooLarge(kind) }
            result += chunk[..<count]
        }
    }

    /// The names in the directory (not `.` and `..`), as bytes, sorted.
    public func directoryEntries() throws(FileReadError) -> [[UInt8]] {
        guard let directory = withCPath({ opendir($0) }) else { throw FileReadError(errno: errno) }
        defer { closedir(directory) }
        var names: [[UInt8]] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                Array(raw.prefix { $0 != 0 })
            }
            if name == [UInt8(ascii: ".")] || name == [UInt8(ascii: "."), UInt8(ascii: ".")] { continue }
            names.append(name)
        }
        return names.sorted { $0.lexicographicallyPrecedes($1) }
    }

    func withCPath<Result>(_ body: (UnsafePointer<CChar>) -> Result) -> Result {
        // A path holding NUL would name another file: it names none.
        let terminated = bytes.contains(0) ? [0] : bytes + [0]
        return terminated.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { body($0.baseAddress!) }  // holds the NUL at least: never nil
        }
    }
}

extension FileReadError {
    /// The error for a failed call's `errno`.
    init(errno code: Int32) {
        self = code == ENOENT || code == ENOTDIR ? .missing : .unreadable(String(cString: strerror(code)))
    }
}
