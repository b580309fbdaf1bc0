import Glibc
import PinproxyCore

extension CommandRun {
    /// Runs `executable` (a path) with `arguments`, writing `input` to its stdin.
    public static func run(_ executable: String, _ arguments: [String], input: [UInt8] = []) throws(SystemError) -> Result {
        var pipes: [[Int32]] = []
        defer { for fd in pipes.joined() where fd >= 0 { close(fd) } }
        for _ in 0..<3 {
            var ends: [Int32] = [-1, -1]
            guard pipe(&ends) == 0 else { throw SystemError("pipe", errno) }
            for fd in ends { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
            pipes.append(ends)
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, pipes[0][0], 0)
        posix_spawn_file_actions_adddup2(&actions, pipes[1][1], 1)
        posix_spawn_file_actions_adddup2(&actions, pipes[2][1], 2)
        // A child that exits before reading all its input must not end this process with
        // SIGPIPE; the child itself gets the default disposition back.
        signal(SIGPIPE, SIG_IGN)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGPIPE)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF))
        _ = fcntl(pipes[0][1], F_SETFL, O_NONBLOCK)
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, &attributes, argv, environ)
        guard spawned == 0 else { throw SystemError("posix_spawn \(executable)", spawned) }
        // The child's ends are the child's only.
        for index in 0..<3 {
            let childEnd = index == 0 ? 0 : 1
            close(pipes[index][childEnd])
            pipes[index][childEnd] = -1
        }
        let (output, error) = exchange(input: input, stdin: &pipes[0][1], stdout: pipes[1][0], stderr: pipes[2][0])
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        // WIFEXITED / WEXITSTATUS / WTERMSIG are macros Swift does not import.
        let exitStatus = status & 0x7F == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
        return Result(status: exitStatus, output: String(decoding: output, as: UTF8.self), error: String(decoding: error, as: UTF8.self))
    }

    /// Writes `input` and reads both outputs until the child closes them, without letting a
    /// full pipe block either side.
    private static func exchange(input: [UInt8], stdin: inout Int32, stdout: Int32, stderr: Int32) -> ([UInt8], [UInt8]) {
        var written = 0
        var collected: [Int32: [UInt8]] = [stdout: [], stderr: []]
        var open: Set<Int32> = [stdout, stderr]
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        if input.isEmpty {
            close(stdin)
            stdin = -1
        }
        while !open.isEmpty || stdin >= 0 {
            var fds = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            if stdin >= 0 { fds.append(pollfd(fd: stdin, events: Int16(POLLOUT), revents: 0)) }
            guard poll(&fds, nfds_t(fds.count), -1) >= 0 else {
                if errno == EINTR { continue }
                break
            }
            for entry in fds where entry.revents != 0 {
                if entry.fd == stdin {
                    let count = input[written...].withUnsafeBytes { write(stdin, $0.baseAddress, $0.count) }
                    if count > 0 { written += count }
                    if count < 0 && errno != EINTR && errno != EAGAIN || written == input.count {
                        close(stdin)
                        stdin = -1
                    }
                } else {
                    let count = read(entry.fd, &chunk, chunk.count)
                    if count > 0 {
                        collected[entry.fd, default: []] += chunk[..<count]
                    } else if count == 0 || errno != EINTR {
                        open.remove(entry.fd)
                    }
                }
            }
        }
        return (collected[stdout] ?? [], collected[stderr] ?? [])
    }
}
