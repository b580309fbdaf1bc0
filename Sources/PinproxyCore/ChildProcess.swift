import FoundationEssentials

/// Runs one external command to completion, blocking the calling thread: for `verify_command`,
/// on a thread of its own, never on an event loop. The child gets `input` on stdin, a given
/// environment and no other descriptor of the daemon; its stdout is discarded and its stderr
/// kept (bounded). It runs in a process group of its own: when `timeout` passes, the whole group
/// is killed, whatever the command did with its descriptors, and waiting for it to die is bounded
/// too. A descendant that left the group (`setsid`) is out of reach. Interop runs it
/// (`ChildProcess.run`).
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

    /// The outcome of a child that ended with wait `status` (nil when it was not reaped),
    /// having written `stderr`.
    package static func outcome(_ status: Int32?, timedOut: Bool, stderr: [UInt8]) -> Outcome {
        let line = String(decoding: stderr.prefix { $0 != UInt8(ascii: "\n") }.prefix(512), as: UTF8.self)
            .trimmingWhitespace()
        guard let status else { return Outcome(exitStatus: nil, signal: nil, timedOut: timedOut, firstErrorLine: line.isEmpty ? nil : line) }
        let exited = status & 0x7f == 0
        return Outcome(exitStatus: exited ? (status >> 8) & 0xff : nil, signal: exited ? nil : status & 0x7f,
                       timedOut: timedOut, firstErrorLine: line.isEmpty ? nil : line)
    }
}

/// A failed system call, with its errno (Interop gives errno's text).
public struct SystemError: Error, Sendable {
    public let operation: String
    public let code: Int32

    package init(_ operation: String, _ code: Int32) {
        self.operation = operation
        self.code = code
    }
}
