import Glibc
import FoundationEssentials
import PinproxyInterop

/// Whether a descriptor is connected to journald's stream socket.
///
/// systemd sets `JOURNAL_STREAM=DEVICE:INODE` (both decimal) for a service whose stdout or stderr
/// goes to the journal. Because the variable is inherited by children whose output may have been
/// redirected elsewhere, it only counts when the descriptor's own `fstat` device and inode match
/// (`sd_journal_stream_fd(3)`, "systemd.exec(5) JOURNAL_STREAM").
public enum JournalStream {
    /// Parses `DEVICE:INODE`; nil when the value is not two decimal numbers.
    public static func parse(_ value: String) -> (device: UInt64, inode: UInt64)? {
        let parts = value.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return nil }
        return (device, inode)
    }

    /// The `fstat` device and inode of `fd`, nil when `fd` is not open.
    public static func identity(of fd: Int32) -> (device: UInt64, inode: UInt64)? {
        guard let status = try? Descriptor.status(of: fd) else { return nil }
        return (status.device, status.inode)
    }

    /// Whether `fd` is the stream that `journalStream` (a `JOURNAL_STREAM` value) names.
    public static func matches(_ journalStream: String?, fd: Int32) -> Bool {
        guard let journalStream, let expected = parse(journalStream), let actual = identity(of: fd) else {
            return false
        }
        return expected.device == actual.device && expected.inode == actual.inode
    }

    /// Whether standard error goes to journald, by the given environment (default: this process's).
    public static func stderrIsJournal(
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> Bool {
        matches(environment["JOURNAL_STREAM"], fd: STDERR_FILENO)
    }
}
