import Glibc
import Foundation

/// A file path as the bytes the kernel sees. A directory entry whose name is not UTF-8 keeps
/// its exact bytes, so that it can still be opened; it is shown with `\xNN` for each byte
/// that is not UTF-8.
public struct FilePathBytes: Hashable, Sendable, CustomStringConvertible {
    public let bytes: [UInt8]

    public init(_ path: String) {
        bytes = Array(path.utf8)
    }

    public init(bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// `self/name`.
    public func appending(_ name: [UInt8]) -> FilePathBytes {
        FilePathBytes(bytes: bytes.last == UInt8(ascii: "/") ? bytes + name : bytes + [UInt8(ascii: "/")] + name)
    }

    /// The path as text: UTF-8, with every byte that is not UTF-8 written `\xNN`.
    public var description: String { Self.display(bytes) }

    /// `name` as text, with every byte that is not UTF-8 written `\xNN`.
    public static func display(_ name: [UInt8]) -> String {
        var result = ""
        var rest = name[...]
        while !rest.isEmpty {
            var decoder = UTF8()
            var iterator = rest.makeIterator()
            switch decoder.decode(&iterator) {
            case .scalarValue(let scalar):
                result.unicodeScalars.append(scalar)
                rest = rest.dropFirst(String(scalar).utf8.count)
            case .error, .emptyInput:
                result += String(format: "\\x%02X", rest.first!)  // rest is not empty: never nil
                rest = rest.dropFirst()
            }
        }
        return result
    }

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

    public enum Kind: Sendable {
        case file, directory
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

/// What a file holds, which sets the most pinproxy reads of it: room for real use, never a
/// 2 GiB file read whole.
public enum FileKind: Sendable, Equatable {
    /// A config: 64 MiB (100,000 hosts with two pins each take 17 MB).
    case config
    /// A CRL file: 256 MiB (some public CAs publish CRLs of tens of MB).
    case crls
    /// Certificates (anchors, pinned certificates, bundles, chains, the system trust bundle) or
    /// a key: 16 MiB.
    case certificates
    /// An OCSP staple: 16 MiB.
    case staple
    /// A status file of the kernel's (`/proc/self/stat`, `/proc/stat`): 1 MiB.
    case processStatus

    /// The most pinproxy reads of one such file, in bytes.
    public var readLimit: Int {
        switch self {
        case .config: return 64 << 20
        case .crls: return 256 << 20
        case .certificates, .staple: return 16 << 20
        case .processStatus: return 1 << 20
        }
    }

    /// The kind, as in "the cap on config files".
    var files: String {
        switch self {
        case .config: return "config files"
        case .crls: return "CRL files"
        case .certificates: return "certificate and key files"
        case .staple: return "OCSP staple files"
        case .processStatus: return "process status files"
        }
    }
}

/// Why a file could not be read, in words that follow its name.
public enum FileReadError: Error, Sendable, Equatable, CustomStringConvertible {
    case missing
    case tooLarge(FileKind)
    case unreadable(String)

    init(errno code: Int32) {
        self = code == ENOENT || code == ENOTDIR ? .missing : .unreadable(String(cString: strerror(code)))
    }

    public var description: String {
        switch self {
        case .missing: return "does not exist"
        case .tooLarge(let kind): return "is larger than \(kind.readLimit >> 20) MiB, the cap on \(kind.files)"
        case .unreadable(let why): return "cannot be read (\(why))"
        }
    }
}
