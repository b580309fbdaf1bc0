import Glibc
import FoundationEssentials
import PinproxyCore
import CPinproxyShims

/// This process's capabilities. Linux keeps them per thread: a thread inherits its creator's
/// sets, and a child process the ambient set of the thread that spawned it.
public enum Capabilities {
    /// The calling thread's sets (`/proc/thread-self/status`).
    public static var current: CapabilitySets? {
        ProcFile.readText("/proc/thread-self/status").flatMap(CapabilitySets.init(status:))
    }

    /// Drops `capability` from every set of the calling thread, the ambient one first.
    public static func drop(_ capability: Int) throws(SystemError) {
        guard pp_drop_capability(Int32(capability)) == 0 else { throw SystemError("capset", errno) }
    }

    /// The ids of this process's threads whose ambient set holds `capability`: the ones whose
    /// children (`verify_command`) would have it.
    public static func threadsPassingOn(_ capability: Int) -> [Int32] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.compactMap { task in
            guard let text = ProcFile.readText("/proc/self/task/\(task)/status"),
                  let sets = CapabilitySets(status: text), sets.ambient & (UInt64(1) << UInt64(capability)) != 0 else { return nil }
            return Int32(task)
        }
    }

    /// Runs this program again, in this process (same pid, arguments and environment), after
    /// dropping `capability` from the calling thread: the new image starts with no thread
    /// holding it, which dropping it in a process whose other threads already run cannot
    /// achieve. `sockets` are passed as socket activation passes them (descriptors 3…,
    /// `LISTEN_FDS`, `LISTEN_FDNAMES`). Returns only by throwing.
    public static func execAgain(dropping capability: Int, passing sockets: [(fd: Int32, name: String)]) throws(SystemError) -> Never {
        // First out of the way (above every target descriptor), then into place: dup2 clears
        // close-on-exec on the copies, which the new image takes.
        var copies: [Int32] = []
        for socket in sockets {
            let copy = fcntl(socket.fd, F_DUPFD_CLOEXEC, 3 + Int32(sockets.count))
            guard copy >= 0 else { throw SystemError("fcntl(F_DUPFD_CLOEXEC)", errno) }
            copies.append(copy)
        }
        for (index, copy) in copies.enumerated() {
            guard dup2(copy, 3 + Int32(index)) >= 0 else { throw SystemError("dup2", errno) }
            close(copy)
        }
        setenv("LISTEN_PID", String(getpid()), 1)
        setenv("LISTEN_FDS", String(sockets.count), 1)
        setenv("LISTEN_FDNAMES", sockets.map(\.name).joined(separator: ":"), 1)
        try drop(capability)
        let arguments = CommandLine.arguments.map { strdup($0) } + [nil]
        execv("/proc/self/exe", arguments)
        throw SystemError("execv(/proc/self/exe)", errno)
    }
}
