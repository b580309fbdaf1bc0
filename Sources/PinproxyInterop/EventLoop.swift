import Glibc
import FoundationEssentials
import COpenSSL
import CLibevent
import CPinproxyShims
import PinproxyCore

/// One libevent `event_base`, run by one thread. Objects created on a loop (timers, buffer
/// events, listeners, DNS) must be used on that loop's thread only; `post` is the one
/// method other threads may call.
public final class EventLoop: @unchecked Sendable {
    let base: OpaquePointer
    /// The event `post` activates; nil only while `init` fails.
    private var wakeup: OpaquePointer?
    private let pending = Locked<[() -> Void]>([])
    private var scratch: UnsafeMutableRawPointer?
    /// The peer certificates this loop's upstream connections presented (`PeerCertificates`).
    let peerCertificates = PeerCertificates()

    /// Where this loop's relays decrypt a record before encrypting it for the other side
    /// (`TLSEndpoint.readIntoScratch`): one buffer of `relayScratchBytes` per loop, not one per tunnel.
    var relayScratch: UnsafeMutableRawPointer {
        if let scratch { return scratch }
        let allocated = UnsafeMutableRawPointer.allocate(byteCount: Self.relayScratchBytes, alignment: 16)
        scratch = allocated
        return allocated
    }

    /// The size of `relayScratch`: one TLS record's plaintext.
    public static let relayScratchBytes = 16 * 1024

    private static let threadingEnabled: Bool = {
        evthread_use_pthreads() == 0
    }()

    /// Throws when libevent cannot make the loop (no memory, no descriptor left for epoll).
    public init() throws {
        guard EventLoop.threadingEnabled else { throw SystemError("evthread_use_pthreads", ENOMEM) }
        guard let base = event_base_new() else { throw SystemError("event_base_new", errno) }
        self.base = base
        let context = Unmanaged.passUnretained(self).toOpaque()
        guard let wakeup = event_new(base, -1, Int16(EV_PERSIST), { _, _, context in
            guard let context else { return }
            Unmanaged<EventLoop>.fromOpaque(context).takeUnretainedValue().runPending()
        }, context) else { throw SystemError("event_new", ENOMEM) }  // deinit frees the base
        self.wakeup = wakeup
        event_add(wakeup, nil)
    }

    deinit {
        scratch?.deallocate()
        if let wakeup { event_free(wakeup) }
        dnsIfCreated?.close()
        event_base_free(base)
    }

    /// Set by DNSResolver so that the loop closes it before freeing the base.
    var dnsIfCreated: DNSResolver?

    /// Runs the loop on the calling thread until `stop` is called.
    public func run() {
        event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY)
        // Work posted before the stop still runs: closes hand their last frees (an SSL, a
        // socket) to the loop's next pass, which must come even when it is the last.
        for _ in 0..<8 {
            let empty = pending.withLock { $0.isEmpty }
            if empty { break }
            runPending()
        }
    }

    /// Ends `run` after the current callbacks; safe from any thread, and also before `run`
    /// has started (the request waits on the loop's queue).
    public func stop() {
        post { [self] in event_base_loopbreak(base) }
    }

    /// Runs `work` on this loop's thread; safe from any thread.
    public func post(_ work: @escaping @Sendable () -> Void) {
        pending.withLock { $0.append(work) }
        if let wakeup { event_active(wakeup, EV_READ, 0) }
    }

    private func runPending() {
        let work = pending.withLock { queued in
            defer { queued.removeAll() }
            return queued
        }
        for item in work { item() }
    }

    /// Now, in monotonic seconds (for idle and progress checks; a wall-clock step changes nothing).
    public var now: TimeInterval {
        ProcessLimits.monotonicSeconds()
    }
}

/// A one-shot or repeating timer on a loop; cancelled when released or by `cancel`, which also
/// releases the action (and so whatever it captured).
public final class Timer {
    private var event: OpaquePointer?
    private var action: (() -> Void)?
    private let repeats: Bool
    /// Held so that the loop's base outlives this timer's event.
    private let loop: EventLoop

    /// Whether the timer can still fire.
    public var isPending: Bool { event != nil }

    /// Fires `action` on `loop` after `interval` seconds (every `interval` when `repeats`).
    public init(loop: EventLoop, after interval: TimeInterval, repeats: Bool = false, _ action: @escaping () -> Void) {
        self.action = action
        self.repeats = repeats
        self.loop = loop
        let context = Unmanaged.passUnretained(self).toOpaque()
        event = event_new(loop.base, -1, repeats ? Int16(EV_PERSIST) : 0, { _, _, context in
            guard let context else { return }
            let timer = Unmanaged<Timer>.fromOpaque(context).takeUnretainedValue()
            // A local copy: the action may cancel its own timer, which releases the stored one.
            let action = timer.action
            action?()
        }, context)
        var tv = timeval(interval)
        event_add(event, &tv)
    }

    /// Stops the timer; it will not fire again, and its action is released.
    public func cancel() {
        action = nil
        if let event {
            event_free(event)
            self.event = nil
        }
    }

    deinit {
        cancel()
    }
}

/// Calls a closure on a loop when the process receives a signal.
public final class SignalWatcher {
    private var event: OpaquePointer?
    private let action: () -> Void
    /// Held so that the loop's base outlives this watcher's event.
    private let loop: EventLoop

    public init(loop: EventLoop, signal number: Int32, _ action: @escaping () -> Void) {
        self.action = action
        self.loop = loop
        let context = Unmanaged.passUnretained(self).toOpaque()
        event = event_new(loop.base, number, Int16(EV_SIGNAL | EV_PERSIST), { _, _, context in
            guard let context else { return }
            Unmanaged<SignalWatcher>.fromOpaque(context).takeUnretainedValue().action()
        }, context)
        event_add(event, nil)
    }

    deinit {
        if let event { event_free(event) }
    }
}

extension timeval {
    init(_ interval: TimeInterval) {
        let whole = max(0, interval.rounded(.down))
        self.init(tv_sec: Int(whole), tv_usec: Int((max(0, interval) - whole) * 1_000_000))
    }
}

/// Where libevent's own diagnostics go (resolver complaints and the like): by default libevent
/// prints them to stderr, which would break one-event-per-line logs.
public enum EventLibraryLog {
    /// libevent's severities, mapped.
    public enum Severity: Sendable {
        case debug, info, warning, error
    }

    private static let handler = Locked<(@Sendable (Severity, String) -> Void)?>(nil)

    /// Sends every libevent diagnostic to `handler` (process-wide).
    public static func route(to handler: @escaping @Sendable (Severity, String) -> Void) {
        self.handler.withLock { $0 = handler }
        event_set_log_callback { severity, message in
            let text = message.map { String(cString: $0) } ?? ""
            let mapped: Severity = switch severity {
            case EVENT_LOG_DEBUG: .debug
            case EVENT_LOG_MSG: .info
            case EVENT_LOG_WARN: .warning
            default: .error
            }
            EventLibraryLog.handler.withLock { $0 }?(mapped, text)
        }
    }
}

/// Makes writes to a closed socket fail with EPIPE instead of killing the process.
public func ignoreBrokenPipe() {
    signal(SIGPIPE, SIG_IGN)
}
