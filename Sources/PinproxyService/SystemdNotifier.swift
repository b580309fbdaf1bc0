import FoundationEssentials
import PinproxyInterop

/// Tells systemd how the daemon is doing (`sd_notify(3)`, spoken directly, no libsystemd).
///
/// Created from the environment: with `NOTIFY_SOCKET` set (a `Type=notify` unit), each call sends
/// one datagram; without it every call is a no-op returning nil. The daemon's sequence:
///
/// - `ready(status:)` once the config is loaded and every listener is bound;
/// - on SIGHUP: `reloading()` (`RELOADING=1` + `MONOTONIC_USEC=`), the reload, then
///   `ready(status:)` again, whether the reload succeeded or kept the old config;
/// - `watchdog()` every `watchdogInterval` (half of `WATCHDOG_USEC`) while healthy;
/// - `stopping()` when SIGTERM starts the drain;
/// - `status(_:)` whenever the one-line summary changes.
///
/// Immutable and `Sendable`: any event-loop thread may call it. Failures are returned (for the
/// daemon to log), never thrown or fatal.
public struct SystemdNotifier: Sendable {
    /// The `NOTIFY_SOCKET` value, nil when not run by a service manager that listens.
    public let socketAddress: String?
    /// How often to send `WATCHDOG=1`: half of `WATCHDOG_USEC`, nil when the watchdog is off or
    /// meant for another process (`WATCHDOG_PID` set to a pid other than ours).
    public let watchdogInterval: Duration?
    /// The clock for `MONOTONIC_USEC` (`CLOCK_MONOTONIC` in µs); injectable for tests.
    private let monotonicMicroseconds: @Sendable () -> UInt64

    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` from `environment`
    /// (default: this process's) for process `pid` (default: this process).
    public init(
        environment: [String: String] = ProcessInfo.processInfo.environment,
        pid: Int32 = ProcessInfo.processInfo.processIdentifier,
        monotonicMicroseconds: @escaping @Sendable () -> UInt64 = { ProcessLimits.monotonicMicroseconds() }
    ) {
        let socket = environment["NOTIFY_SOCKET"].flatMap { $0.isEmpty ? nil : $0 }
        self.socketAddress = socket
        self.watchdogInterval = Self.watchdogInterval(environment: environment, pid: pid)
        self.monotonicMicroseconds = monotonicMicroseconds
    }

    /// Whether notifications are sent at all.
    public var isEnabled: Bool { socketAddress != nil }

    /// `READY=1`, with a status line when given.
    @discardableResult
    public func ready(status: String? = nil) -> NotifySocketError? {
        var fields = ["READY=1"]
        if let status { fields.append(Self.statusField(status)) }
        return send(fields)
    }

    /// `RELOADING=1` and `MONOTONIC_USEC=` (now, on `CLOCK_MONOTONIC`), which systemd ≥ 253
    /// requires for `Type=notify-reload` and older versions accept. Follow with `ready(status:)`.
    @discardableResult
    public func reloading(status: String? = nil) -> NotifySocketError? {
        var fields = ["RELOADING=1", "MONOTONIC_USEC=\(monotonicMicroseconds())"]
        if let status { fields.append(Self.statusField(status)) }
        return send(fields)
    }

    /// `STOPPING=1`, at the start of shutdown.
    @discardableResult
    public func stopping(status: String? = nil) -> NotifySocketError? {
        var fields = ["STOPPING=1"]
        if let status { fields.append(Self.statusField(status)) }
        return send(fields)
    }

    /// `STATUS=`: one line shown by `systemctl status`; line breaks become spaces.
    @discardableResult
    public func status(_ text: String) -> NotifySocketError? {
        send([Self.statusField(text)])
    }

    /// `WATCHDOG=1`: the daemon is alive. A no-op when `watchdogInterval` is nil.
    @discardableResult
    public func watchdog() -> NotifySocketError? {
        guard watchdogInterval != nil else { return nil }
        return send(["WATCHDOG=1"])
    }

    /// Sends `fields`, newline-separated, as one datagram; nil when sent or disabled.
    @discardableResult
    public func send(_ fields: [String]) -> NotifySocketError? {
        guard let socketAddress else { return nil }
        do {
            try NotifySocket.send(fields.joined(separator: "\n"), to: socketAddress)
            return nil
        } catch {
            return error
        }
    }

    /// `STATUS=` with the text on one line.
    static func statusField(_ text: String) -> String {
        let line = text.split(whereSeparator: \.isNewline).joined(separator: " ")
        return "STATUS=\(line)"
    }

    /// Half of `WATCHDOG_USEC`, as `sd_watchdog_enabled(3)` advises; nil when unset, not a
    /// positive number, or `WATCHDOG_PID` names another process.
    static func watchdogInterval(environment: [String: String], pid: Int32) -> Duration? {
        guard let text = environment["WATCHDOG_USEC"], let usec = UInt64(text), usec > 0 else { return nil }
        if let pidText = environment["WATCHDOG_PID"] {
            guard let watchdogPID = Int32(pidText), watchdogPID == pid else { return nil }
        }
        return .microseconds(Int64(clamping: usec / 2))
    }
}
