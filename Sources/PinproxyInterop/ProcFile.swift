import Glibc

/// Files of procfs (and cgroupfs): their size reads as 0 and each read(2) returns a page or so,
/// so they are read to the end in chunks (`String(contentsOfFile:)` stops after the first).
enum ProcFile {
    /// The whole file as text, or nil when it cannot be read or holds more than `limit` bytes.
    static func readText(_ path: String, limit: Int = 16 << 20) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = read(fd, &chunk, chunk.count)
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { return nil }
            if count == 0 { return String(decoding: bytes, as: UTF8.self) }
            bytes += chunk[..<count]
            if bytes.count > limit { return nil }
        }
    }
}
