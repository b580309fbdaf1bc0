import Glibc
import FoundationEssentials
import PinproxyCore
import PinproxyInterop

/// The `pid_file` of a running daemon: written by `pinproxy run` once its listeners are up,
/// replaced by a new file of the same content each time it has handled a SIGHUP, removed at
/// exit, and read by `pinproxy reload` to signal that daemon and no other, then to see it done.
enum PidFile {
    /// The process id the file names, if it names one.
    static func read(_ path: String) -> pid_t? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        return pid_t(String(decoding: data, as: UTF8.self).trimmingWhitespace())
    }

    /// Whether `pid` is a live pinproxy process (its command name is `pinproxy`).
    static func isPinproxy(_ pid: pid_t) -> Bool {
        guard pid > 0, let data = FileManager.default.contents(atPath: "/proc/\(pid)/comm") else { return false }
        return String(decoding: data, as: UTF8.self).trimming(while: \.isNewline) == "pinproxy"
    }

    /// Fails when another live pinproxy owns `path`.
    static func checkFree(_ path: String) throws {
        if let other = read(path), other != ProcessInfo.processInfo.processIdentifier, isPinproxy(other) {
            throw PidFileError(message: "\(path) names another running pinproxy (pid \(other)): stop it first, or give this daemon its own pid_file")
        }
    }

    /// Writes this process's id to `path` (replaced atomically), unless another live pinproxy
    /// owns the file. Call it once SIGHUP is handled: the file invites that signal.
    static func claim(_ path: String) throws {
        try checkFree(path)
        let own = ProcessInfo.processInfo.processIdentifier
        do {
            try Data("\(own)\n".utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            throw PidFileError(message: "cannot write \(path): \(systemMessage(of: error))")
        }
    }

    /// Writes `path` anew (a new file renamed over it) if it still names this process: the
    /// sign `pinproxy reload` waits for.
    static func replace(_ path: String) {
        guard read(path) == ProcessInfo.processInfo.processIdentifier else { return }
        try? Data("\(ProcessInfo.processInfo.processIdentifier)\n".utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
    }

    /// The file `path` is now (device and inode), to tell when it has been replaced; nil when
    /// there is none.
    static func identity(_ path: String) -> String? {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
              let device = attributes[.systemNumber], let inode = attributes[.systemFileNumber] else { return nil }
        return "\(device):\(inode)"
    }

    /// Removes `path` if it still names this process.
    static func release(_ path: String) {
        if read(path) == ProcessInfo.processInfo.processIdentifier { try? FileManager.default.removeItem(atPath: path) }
    }
}

struct PidFileError: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}
