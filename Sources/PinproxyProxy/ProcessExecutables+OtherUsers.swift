import PinproxyInterop

extension ProcessExecutables {
    /// Why this process cannot read which program holds another user's socket, or nil when it
    /// can: it needs CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE, and a /proc that shows other users'
    /// processes and lets them be read (`ProtectProc=`, `hidepid=`, a ptrace policy can forbid it).
    /// Tried on a process of another user when there is one.
    static func otherUsersProblem() -> String? {
        let uid = CurrentProcess.effectiveUserID
        let missing = [(2, "CAP_DAC_READ_SEARCH"), (19, "CAP_SYS_PTRACE")].filter { !hasEffectiveCapability($0.0) }.map(\.1)
        guard missing.isEmpty else {
            return "pinproxy runs as uid \(uid) without \(missing.joined(separator: " and ")), which reading another user's /proc/PID/fd and /proc/PID/exe needs"
        }
        for pid in processes() {
            guard let owner = owner(of: pid), owner != uid else { continue }
            guard let problem = fdDirectoryProblem(of: pid) else { return nil }
            if problem.forbidden {
                return "/proc/\(pid)/fd of uid \(owner) cannot be read (\(problem.reason)): /proc or ptrace is restricted (ProtectProc=, hidepid=)"
            }
        }
        return nil
    }
}
