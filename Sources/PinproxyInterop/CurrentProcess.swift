import Glibc
import PinproxyCore

/// This process's ids, and the signals it sends to others.
public enum CurrentProcess {
    /// The real user id.
    public static var userID: uid_t { getuid() }

    /// The effective user id: whose files this process may use as their owner.
    public static var effectiveUserID: uid_t { geteuid() }

    /// Sends SIGHUP to the process `pid` (a daemon's "re-read your config").
    public static func sendHangUp(to pid: pid_t) throws(SystemError) {
        guard kill(pid, SIGHUP) == 0 else { throw SystemError("kill", errno) }
    }
}
