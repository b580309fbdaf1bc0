import Glibc
import Foundation

/// Runs one external command to completion, blocking the calling thread: for `verify_command`,
/// on a thread of its own, never on an event loop. The child gets `input` on stdin, a given
/// environment and no other descriptor of the daemon; its stdout is discarded and its stderr
/// kept (bounded); it is killed when `timeout` passes.
public enum ChildProcess {
    /// How a run ended.
    public struct Outcome: Sendable, Equatable {
        /// The exit status, or nil when the command did not exit normally (signal, timeout).
        public let exitStatus: Int32?
        /// The signal that ended it, if one did.
        public let signal: Int32?
        public let timedOut: Bool
        /// The first line the command wrote to stderr (at most 512 bytes), if any.
        public let firstErrorLine: String?
    }

    private static let spawnLock = NSLock()

    /// Most bytes of stderr kept.
    static let stderrLimit = 4096

    /// Runs `arguments` (`arguments[0]` is the executable's path) with `environment`, writing
    /// `input` to its stdin, and waits at most `timeout` for it to exit. Throws when it cannot
    /// be started.
    public static func run(_ arguments: [String], environment: [String: String], input: [UInt8],
                           timeout: TimeInterval) throws -> Outcome {
        guard !arguments.isEmpty else { throw SystemError("ChildProcess.run without an executable", EINVAL) }
        // Pipes are made close-on-exec under the lock every spawn takes, so that no child
        // started by another thread inherits them.
        spawnLock.lock()
        var locked = true
        defer { if locked { spawnLock.unlock() } }
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
        // Its own process group, so that a timeout kills what it started too; default signal
        // dispositions (the daemon ignores SIGPIPE) and an empty signal mask.
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
        spawnLock.unlock()
        locked = false
        guard spawned == 0 else {
            close(stdinPipe[1]); close(stderrPipe[0])
            throw SystemError("cannot start \(arguments[0])", spawned)
        }
        let input = input
        var written = 0
        var stderr: [UInt8] = []
        var writeEnd = stdinPipe[1]
        var readEnd = stderrPipe[0]
        _ = fcntl(writeEnd, F_SETFL, fcntl(writeEnd, F_GETFL) | O_NONBLOCK)
        let deadline = monotonicNow() + timeout
        var timedOut = false
        // Feed stdin and drain stderr until both are done and the child has exited, or time runs out.
        while true {
            if input.count == written, writeEnd >= 0 { close(writeEnd); writeEnd = -1 }
            var status: Int32 = 0
            if writeEnd < 0, readEnd < 0 {
                let reaped = waitpid(pid, &status, 0)
                return outcome(reaped == pid ? status : nil, timedOut: false, stderr: stderr)
            }
            let remaining = deadline - monotonicNow()
            if remaining <= 0 { timedOut = true; break }
            var fds: [pollfd] = []
            if writeEnd >= 0 { fds.append(pollfd(fd: writeEnd, events: Int16(POLLOUT), revents: 0)) }
            if readEnd >= 0 { fds.append(pollfd(fd: readEnd, events: Int16(POLLIN), revents: 0)) }
            let ready = poll(&fds, nfds_t(fds.count), Int32(min(remaining, 1) * 1000) + 1)
            if ready < 0 && errno != EINTR { break }
            for entry in fds where entry.revents != 0 {
                if entry.fd == writeEnd {
                    // writeEnd is open while written < input.count: the input is not empty, so never nil.
                    let count = input.withUnsafeBytes { write(writeEnd, $0.baseAddress! + written, input.count - written) }
                    if count > 0 { written += count } else if count < 0 && errno != EAGAIN && errno != EINTR {
                        // The command stopped reading (it may decide without the whole chain).
                        close(writeEnd); writeEnd = -1; written = input.count
                    }
                } else {
                    var buffer = [UInt8](repeating: 0, count: 4096)
                    let count = read(readEnd, &buffer, buffer.count)
                    if count > 0 {
                        stderr += buffer.prefix(min(count, max(0, stderrLimit - stderr.count)))
                    } else if count == 0 || (errno != EAGAIN && errno != EINTR) {
                        close(readEnd); readEnd = -1
                    }
                }
            }
        }
        if writeEnd >= 0 { close(writeEnd) }
        if readEnd >= 0 { close(readEnd) }
        kill(-pid, SIGKILL)
        kill(pid, SIGKILL)
        var status: Int32 = 0
        let reaped = waitpid(pid, &status, 0)
        return outcome(reaped == pid ? status : nil, timedOut: timedOut, stderr: stderr)
    }

    private static func outcome(_ status: Int32?, timedOut: Bool, stderr: [UInt8]) -> Outcome {
        let line = String(decoding: stderr.prefix { $0 != UInt8(ascii: "\n") }.prefix(512), as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        guard let status else { return Outcome(exitStatus: nil, signal: nil, timedOut: timedOut, firstErrorLine: line.isEmpty ? nil : line) }
        let exited = status & 0x7f == 0
        return Outcome(exitStatus: exited ? (status >> 8) & 0xff : nil, signal: exited ? nil : status & 0x7f,
                       timedOut: timedOut, firstErrorLine: line.isEmpty ? nil : line)
    }

    private static func monotonicNow() -> TimeInterval {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return TimeInterval(now.tv_sec) + TimeInterval(now.tv_nsec) / 1e9
    }
}

/// A failed system call, with errno's text.
public struct SystemError: Error, CustomStringConvertible, Sendable {
    public let operation: String
    public let code: Int32

    init(_ operation: String, _ code: Int32) {
        self.operation = operation
        self.code = code
    }

    public var description: String { "\(operation): \(String(cString: strerror(code)))" }
}
