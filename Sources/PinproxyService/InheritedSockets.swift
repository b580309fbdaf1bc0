import FoundationEssentials
import PinproxyCore
import PinproxyInterop

/// Why the sockets a service manager passed (`LISTEN_FDS`) cannot be used.
public enum InheritedSocketsError: Error, Equatable, Sendable, CustomStringConvertible {
    /// `LISTEN_PID` or `LISTEN_FDS` is not a positive decimal number.
    case malformed(variable: String, value: String)
    /// More descriptors than any sane unit passes (a guard against a corrupt count).
    case tooMany(Int)
    /// Descriptor `fd` is not open.
    case notOpen(fd: Int32)
    /// Descriptor `fd` is open but not a listening `SOCK_STREAM` socket.
    case notListeningStream(fd: Int32)
    /// A system call failed on `fd`.
    case system(call: String, fd: Int32, errno: Int32)

    public var description: String {
        switch self {
        case .malformed(let variable, let value):
            return "\(variable)='\(value)' is not a positive number"
        case .tooMany(let count):
            return "LISTEN_FDS=\(count) is more than \(InheritedSockets.maximumCount) descriptors"
        case .notOpen(let fd):
            return "inherited descriptor \(fd) is not open"
        case .notListeningStream(let fd):
            return "inherited descriptor \(fd) is not a listening stream socket"
        case .system(let call, let fd, let code):
            return "\(call) on inherited descriptor \(fd): \(ProcessEnvironment.errorText(code))"
        }
    }
}

/// A listening socket the service manager passed, with the name its unit gave it
/// (`FileDescriptorName=`; systemd's default is the socket unit's name).
public struct InheritedSocket: Sendable, Equatable {
    public let fd: Int32
    public let name: String

    public init(fd: Int32, name: String) {
        self.fd = fd
        self.name = name
    }
}

/// Socket activation (`sd_listen_fds_with_names(3)`) without libsystemd: the listening sockets a service
/// manager opened for this process are descriptors `3 ..< 3 + LISTEN_FDS`, and are meant for
/// this process only when `LISTEN_PID` is its pid.
public enum InheritedSockets {
    /// The first passed descriptor (`SD_LISTEN_FDS_START`).
    public static let firstDescriptor: Int32 = 3
    /// A bound on `LISTEN_FDS`, far above what any unit passes.
    public static let maximumCount = 1024
    /// The variables the protocol uses; `take` removes them from the environment.
    public static let variables = ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"]

    /// The pure half: which descriptors `environment` passes to process `pid`.
    /// Returns `[]` when `LISTEN_FDS` or `LISTEN_PID` is absent or `LISTEN_PID` names another
    /// process (the variables were inherited, not meant for us). Checks nothing about the
    /// descriptors themselves.
    public static func parse(environment: [String: String], pid: Int32) throws(InheritedSocketsError) -> [Int32] {
        guard let pidText = environment["LISTEN_PID"], let countText = environment["LISTEN_FDS"] else {
            return []
        }
        guard let listenPID = Int32(pidText), listenPID > 0 else {
            throw .malformed(variable: "LISTEN_PID", value: pidText)
        }
        guard listenPID == pid else { return [] }
        guard let count = Int(countText), count >= 0 else {
            throw .malformed(variable: "LISTEN_FDS", value: countText)
        }
        guard count <= maximumCount else { throw .tooMany(count) }
        return (0..<Int32(count)).map { firstDescriptor + $0 }
    }

    /// The names `LISTEN_FDNAMES` gives `count` descriptors, in order: colon-separated, and
    /// "unknown" for each one it does not name (as `sd_listen_fds_with_names` says).
    public static func names(environment: [String: String], count: Int) -> [String] {
        let listed = environment["LISTEN_FDNAMES"].map { $0.split(separator: ":", omittingEmptySubsequences: false).map(String.init) } ?? []
        return (0..<count).map { $0 < listed.count && !listed[$0].isEmpty ? listed[$0] : "unknown" }
    }

    /// Reads this process's `LISTEN_*` variables, unsets them (so no child inherits them, as
    /// `sd_listen_fds(1)` does, whatever the outcome), checks that every passed descriptor is an
    /// open, listening `SOCK_STREAM` socket, and sets `FD_CLOEXEC` on each.
    ///
    /// - Returns: the sockets with their names, in order (`[]` when the process was not
    ///   socket-activated). The caller owns them.
    public static func take() throws(InheritedSocketsError) -> [InheritedSocket] {
        let environment = ProcessInfo.processInfo.environment
        for name in variables { ProcessEnvironment.unset(name) }
        let descriptors = try parse(environment: environment, pid: ProcessInfo.processInfo.processIdentifier)
        let names = names(environment: environment, count: descriptors.count)
        // Close-on-exec first, on every descriptor, so none leaks even when one is invalid.
        var firstError: InheritedSocketsError?
        for fd in descriptors {
            do throws(InheritedSocketsError) {
                try setCloseOnExec(fd)
            } catch {
                firstError = firstError ?? error
            }
        }
        for fd in descriptors where firstError == nil {
            do throws(InheritedSocketsError) {
                try validateListening(fd)
            } catch {
                firstError = error
            }
        }
        if let firstError { throw firstError }
        return zip(descriptors, names).map { InheritedSocket(fd: $0, name: $1) }
    }

    /// Throws unless `fd` is an open, listening `SOCK_STREAM` socket.
    public static func validateListening(_ fd: Int32) throws(InheritedSocketsError) {
        let isSocket: Bool
        do throws(DescriptorError) {
            isSocket = try Descriptor.status(of: fd).isSocket
        } catch {
            throw inheritedError(error, fd: fd)
        }
        guard isSocket, Descriptor.isListeningStream(fd) else { throw .notListeningStream(fd: fd) }
    }

    /// Sets `FD_CLOEXEC` on `fd`, keeping its other descriptor flags.
    static func setCloseOnExec(_ fd: Int32) throws(InheritedSocketsError) {
        do throws(DescriptorError) {
            try Descriptor.setCloseOnExec(fd)
        } catch {
            throw inheritedError(error, fd: fd)
        }
    }

    private static func inheritedError(_ error: DescriptorError, fd: Int32) -> InheritedSocketsError {
        switch error {
        case .notOpen: return .notOpen(fd: fd)
        case .system(let call, let code): return .system(call: call, fd: fd, errno: code)
        }
    }
}
