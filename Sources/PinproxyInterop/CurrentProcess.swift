import Glibc
import PinproxyCore

/// This process's ids, and the signals it sends to others.
public enum CurrentProcess {
    /// The real user id.
    public static var userID: uid_t { getuid() }

    /// The effective user id: whose files this process may use as their owner.
    public static var effectiveUserID: uid_t { geteuid() }

    /// Becomes the program `arguments` names (found on PATH), with this process's descriptors
    /// and environment, after flushing standard output. Returns only by throwing.
    public static func replace(with arguments: [String]) throws(SystemError) -> Never {
        fflush(nil)
        let argv = arguments.map { strdup($0) } + [nil]
        execvp(arguments[0], argv)
        let code = errno
        argv.forEach { free($0) }
        throw SystemError("cannot run \(arguments[0])", code)
    }

    /// Sends SIGHUP to the process `pid` (a daemon's "re-read your config").
    public static func sendHangUp(to pid: pid_t) throws(SystemError) {
        guard kill(pid, SIGHUP) == 0 else { throw SystemError("kill", errno) }
    }
}
