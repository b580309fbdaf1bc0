import FoundationEssentials

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
                result += "\\x" + rest.first!.hex(digits: 2, uppercase: true)  // rest is not empty: never nil
                rest = rest.dropFirst()
            }
        }
        return result
    }

    public enum Kind: Sendable {
        case file, directory
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
    /// A Certificate Transparency log list: 4 MiB (Chrome's is about 40 KiB).
    case ctLogList

    /// The most pinproxy reads of one such file, in bytes.
    public var readLimit: Int {
        switch self {
        case .config: return 64 << 20
        case .crls: return 256 << 20
        case .certificates, .staple: return 16 << 20
        case .processStatus: return 1 << 20
        case .ctLogList: return 4 << 20
        }
    }

    /// The kind, as in "the cap on config files".
    public var files: String {
        switch self {
        case .config: return "config files"
        case .crls: return "CRL files"
        case .certificates: return "certificate and key files"
        case .staple: return "OCSP staple files"
        case .processStatus: return "process status files"
        case .ctLogList: return "CT log lists"
        }
    }
}

/// Why a file could not be read, in words that follow its name.
public enum FileReadError: Error, Sendable, Equatable, CustomStringConvertible {
    case missing
    case tooLarge(FileKind)
    case unreadable(String)

    public var description: String {
        switch self {
        case .missing: return "does not exist"
        case .tooLarge(let kind): return "is larger than \(kind.readLimit >> 20) MiB, the cap on \(kind.files)"
        case .unreadable(let why): return "cannot be read (\(why))"
        }
    }
}
