import CPinproxyShims
import Glibc
import FoundationEssentials
import PinproxyCore

extension ChildProcess {
    /// A started command: its pid, the pidfd that wakes a poll when it exits, our pipe ends.
    private struct Child {
        let pid: pid_t
        /// -1 where pidfd_open is refused (an old kernel, a seccomp filter): then polls tick.
        let pidfd: Int32
        var stdin: Int32
        var stderr: Int32

        mutating func closeStdin() {
            if stdin >= 0 { close(stdin); stdin = -1 }
        }

        mutating func closeStderr() {
            if stderr >= 0 { close(stderr); stderr = -1 }
        }

        mutating func closeAll() {
            closeStdin()
            closeStderr()
            if pidfd >= 0 { close(pidfd) }
        }
    }

    /// How the exchange with a child ended.
    private enum Ending {
        /// It exited and both pipes are closed.
        case exited
        case timedOut
        /// poll failed: the child is killed like one that timed out.
        case failed
    }

    private static let spawnLock = Locked(())

    /// Most bytes of stderr kept.
    static let stderrLimit = 4096

    /// How long a killed command may take to die before the run returns without it.
    static let killGrace: TimeInterval = 1

    /// How often a child is looked at when there is no pidfd to wake the poll.
    static let pollTick: TimeInterval = 0.02

    /// Killed commands that had not died within `killGrace`: later runs reap them.
    private static let unreaped = Locked<[pid_t]>([])

    /// Runs `arguments` (`arguments[0]` is the executable's path) with `environment`, writing
    /// `input` to its stdin, and waits at most `timeout` for it to exit (and close its pipes),
    /// then at most `killGrace` for its killed process group. Throws when it cannot be started.
    public static func run(_ arguments: [String], environment: [String: String], input: [UInt8],
                           timeout: TimeInterval) throws -> Outcome {
        guard !arguments.isEmpty else { throw SystemError("ChildProcess.run without an executable", EINVAL) }
        reapLeftovers()
        var child = try spawn(arguments, environment: environment)
        defer { child.closeAll() }
        let (stderr, ending) = withoutBrokenPipeSignal { exchange(with: &child, input: input, until: monotonicNow() + timeout) }
        if ending != .exited {
            // Not reaped yet (at worst a zombie), so its pid still names its process group.
            kill(-child.pid, SIGKILL)
            kill(child.pid, SIGKILL)
        }
        let status = reap(child, within: ending == .exited ? 0 : killGrace)
        return outcome(status, timedOut: ending == .timedOut, stderr: stderr)
    }

    /// Starts the command in a process group of its own, with default signal dispositions (the
    /// daemon ignores SIGPIPE), an empty signal mask, stdin and stderr on pipes, stdout on /dev/null.
    private static func spawn(_ arguments: [String], environment: [String: String]) throws -> Child {
        // Pipes are made close-on-exec under the lock every spawn takes, so that no child
        // started by another thread inherits them.
        try spawnLock.withLock { _ in try spawnLocked(arguments, environment: environment) }
    }

    private static func spawnLocked(_ arguments: [String], environment: [String: String]) throws -> Child {
        var stdinPipe: [Int32] = [-1, -1]
        var stderrPipe: [Int32] = [-1, -1]
        guard pipe(&stdinPipe) == 0 else { throw SystemError("pipe", errno) }
        guard pipe(&stderrPipe) == 0 else {
            let code = errno
            close(stdinPipe[0]); close(stdinPipe[1])
            throw SystemError("pipe", code)
        }
        for fd in stdinPipe + stderrPipe { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, stdinPipe[0], 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, stderrPipe[1], 2)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t()
        sigfillset(&defaults)
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))

        var pid: pid_t = 0
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        let spawned = posix_spawn(&pid, arguments[0], &actions, &attributes, argv, envp)
        close(stdinPipe[0])
        close(stderrPipe[1])
        guard spawned == 0 else {
            close(stdinPipe[1]); close(stderrPipe[0])
            throw SystemError("cannot start \(arguments[0])", spawned)
        }
        _ = fcntl(stdinPipe[1], F_SETFL, fcntl(stdinPipe[1], F_GETFL) | O_NONBLOCK)
        return Child(pid: pid, pidfd: pp_pidfd_open(pid), stdin: stdinPipe[1], stderr: stderrPipe[0])
    }

    /// Feeds stdin and drains stderr until the child has exited and both pipes are closed, or
    /// `deadline` passes. The child is never reaped here.
    private static func exchange(with child: inout Child, input: [UInt8], until deadline: TimeInterval) -> (stderr: [UInt8], ending: Ending) {
        var written = 0
        var stderr: [UInt8] = []
        var exited = false
        while true {
            if written == input.count { child.closeStdin() }
            if !exited { exited = hasExited(child.pid) }
            if exited, child.stdin < 0, child.stderr < 0 { return (stderr, .exited) }
            let remaining = deadline - monotonicNow()
            if remaining <= 0 { return (stderr, .timedOut) }
            var fds: [pollfd] = []
            if child.stdin >= 0 { fds.append(pollfd(fd: child.stdin, events: Int16(POLLOUT), revents: 0)) }
            if child.stderr >= 0 { fds.append(pollfd(fd: child.stderr, events: Int16(POLLIN), revents: 0)) }
            if !exited, child.pidfd >= 0 { fds.append(pollfd(fd: child.pidfd, events: Int16(POLLIN), revents: 0)) }
            let tick: TimeInterval = exited || child.pidfd >= 0 ? 1 : pollTick
            if poll(&fds, nfds_t(fds.count), milliseconds(min(remaining, tick))) < 0 && errno != EINTR {
                return (stderr, .failed)
            }
            for entry in fds where entry.revents != 0 {
                if entry.fd == child.stdin {
                    let count = input.withUnsafeBytes { bytes in
                        bytes.baseAddress.map { write(child.stdin, $0 + written, input.count - written) } ?? 0
                    }
                    if count > 0 { written += count } else if count < 0 && errno != EAGAIN && errno != EINTR {
                        // The command stopped reading (it may decide without the whole chain).
                        written = input.count
                    }
                } else if entry.fd == child.stderr {
                    var buffer = [UInt8](repeating: 0, count: 4096)
                    let count = read(child.stderr, &buffer, buffer.count)
                    if count > 0 {
                        stderr += buffer.prefix(min(count, max(0, stderrLimit - stderr.count)))
                    } else if count == 0 || (errno != EAGAIN && errno != EINTR) {
                        child.closeStderr()
                    }
                }
                // The pidfd: looked at on the next pass.
            }
        }
    }

    /// Runs `body` with SIGPIPE blocked on this thread, then discards one it raised: a write to a
    /// command that has closed its stdin fails with EPIPE, whatever the process does with SIGPIPE
    /// (the daemon ignores it, the CLI does not).
    private static func withoutBrokenPipeSignal<Result>(_ body: () -> Result) -> Result {
        var pipeSignal = sigset_t()
        sigemptyset(&pipeSignal)
        sigaddset(&pipeSignal, SIGPIPE)
        var previous = sigset_t()
        pthread_sigmask(SIG_BLOCK, &pipeSignal, &previous)
        defer {
            if sigismember(&previous, SIGPIPE) == 0 {
                var now = timespec()
                while sigtimedwait(&pipeSignal, nil, &now) == SIGPIPE {}
            }
            pthread_sigmask(SIG_SETMASK, &previous, nil)
        }
        return body()
    }

    /// Whether `pid` (a child of ours) has exited, without reaping it. A child that is not ours
    /// to wait for any more counts as exited.
    private static func hasExited(_ pid: pid_t) -> Bool {
        var info = siginfo_t()
        guard waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 else { return errno == ECHILD }
        return info._sifields._sigchld.si_pid == pid
    }

    /// Reaps `child`'s process once it has exited, waiting at most `grace` for that; nil when it
    /// did not exit in time (a later run reaps it) or was not ours to reap.
    private static func reap(_ child: Child, within grace: TimeInterval) -> Int32? {
        let deadline = monotonicNow() + grace
        while !hasExited(child.pid) {
            let remaining = deadline - monotonicNow()
            guard remaining > 0 else {
                unreaped.withLock { $0.append(child.pid) }
                return nil
            }
            var fds = child.pidfd >= 0 ? [pollfd(fd: child.pidfd, events: Int16(POLLIN), revents: 0)] : []
            _ = poll(&fds, nfds_t(fds.count), milliseconds(min(remaining, child.pidfd >= 0 ? 1 : pollTick)))
        }
        var status: Int32 = 0
        return waitpid(child.pid, &status, 0) == child.pid ? status : nil
    }

    /// Reaps the killed commands that have died since.
    private static func reapLeftovers() {
        unreaped.withLock { pids in pids.removeAll { waitpid($0, nil, WNOHANG) != 0 } }
    }

    private static func milliseconds(_ seconds: TimeInterval) -> Int32 {
        Int32(seconds * 1000) + 1
    }

    private static func monotonicNow() -> TimeInterval {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return TimeInterval(now.tv_sec) + TimeInterval(now.tv_nsec) / 1e9
    }
}

extension SystemError: CustomStringConvertible {
    public var description: String { "\(operation): \(reason)" }

    /// errno's text alone: `No such file or directory`.
    public var reason: String { String(cString: strerror(code)) }

    /// Whether the call failed because the path does not exist (ENOENT).
    public var isNotFound: Bool { code == ENOENT }
}
