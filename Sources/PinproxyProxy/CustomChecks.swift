import Dispatch
import Foundation
import PinproxyInterop
import PinproxyPolicy

/// Runs entries' `verify_command`s for the workers: never on an event loop. At most
/// `concurrency` commands run at once, at most `queueLimit` wait (more are refused at once as
/// `custom-check`), each is killed after its timeout, and answers are cached per (chain, host,
/// port, command, client identity: the command is told it) for the cache time of the config the
/// connection runs under.
public final class CustomChecks: Sendable {
    struct Key: Hashable, Sendable {
        let chain: [[UInt8]]
        let host: String
        let port: UInt16
        let command: [String]
        /// The `PINPROXY_CLIENT*` variables the command gets.
        let client: [String: String]
    }

    private struct State {
        var cache: [Key: (result: CustomCheckResult, expires: TimeInterval)] = [:]
        var waiting = 0
    }

    private let state = Locked<State>(State())
    private let slots: DispatchSemaphore
    private let queue = DispatchQueue(label: "pinproxy.verify-command", attributes: .concurrent)
    private let queueLimit: Int

    init(concurrency: Int, queueLimit: Int = 256) {
        slots = DispatchSemaphore(value: max(1, concurrency))
        self.queueLimit = queueLimit
    }

    /// Checks `chain` (the verified chain, leaf first) for `host`:`port` with `command`, and calls
    /// `done` on `loop` with the answer.
    func check(_ command: [String], chain: [Certificate], host: TargetHost, port: UInt16, client: ClientIdentity?, timeout: TimeInterval,
               cacheSeconds: TimeInterval, on loop: EventLoop, done: @escaping (CustomCheckResult) -> Void) {
        let done = OnLoop(done)
        let name = host.description.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        let key = Key(chain: chain.map(\.der), host: name, port: port, command: command, client: Self.environment(for: client))
        let now = ProcessLimits.monotonicSeconds()
        let cached: CustomCheckResult? = state.withLock { state in
            if let hit = state.cache[key], hit.expires > now { return hit.result }
            guard state.waiting < queueLimit else {
                return CustomCheckResult(passed: false, detail: "verify_command was not run: \(queueLimit) checks are already waiting")
            }
            state.waiting += 1
            return nil
        }
        if let cached { return loop.post { done.call(cached) } }
        let input = Array(chain.map(\.pem).joined().utf8)
        queue.async { [self] in
            slots.wait()
            let result = Self.run(command, host: name, port: port, client: key.client, input: input, timeout: timeout)
            slots.signal()
            let expires = ProcessLimits.monotonicSeconds() + cacheSeconds
            state.withLock { state in
                state.waiting -= 1
                if state.cache.count >= 10_000 { state.cache = state.cache.filter { $0.value.expires > expires - cacheSeconds } }
                if cacheSeconds > 0 { state.cache[key] = (result, expires) }
            }
            loop.post { done.call(result) }
        }
    }

    /// What the command is told about the client: `PINPROXY_CLIENT` (`local`, `unknown` or
    /// `remote`) and, for a local one, `PINPROXY_CLIENT_UID`, `_USER`, `_UNIT` and `_EXE` as far
    /// as they are known. Nothing without `[clients]`.
    public static func environment(for client: ClientIdentity?) -> [String: String] {
        switch client {
        case nil: return [:]
        case .unknown: return ["PINPROXY_CLIENT": "unknown"]
        case .remote: return ["PINPROXY_CLIENT": "remote"]
        case .local(let local):
            var variables = ["PINPROXY_CLIENT": "local", "PINPROXY_CLIENT_UID": String(local.uid)]
            variables["PINPROXY_CLIENT_USER"] = local.user
            variables["PINPROXY_CLIENT_UNIT"] = local.unit
            variables["PINPROXY_CLIENT_EXE"] = local.exe
            return variables
        }
    }

    /// Runs `command` once, blocking; also what `pinproxy evaluate` calls.
    public static func run(_ command: [String], host: String, port: UInt16, client: [String: String] = [:], input: [UInt8],
                           timeout: TimeInterval) -> CustomCheckResult {
        let environment = ["PINPROXY_HOST": host, "PINPROXY_PORT": String(port),
                           "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"].merging(client) { first, _ in first }
        do {
            let outcome = try ChildProcess.run(command, environment: environment, input: input, timeout: timeout)
            if outcome.exitStatus == 0 && !outcome.timedOut { return CustomCheckResult(passed: true, detail: "") }
            let said = outcome.firstErrorLine.map { ": \($0)" } ?? ""
            if outcome.timedOut { return CustomCheckResult(passed: false, detail: "\(command[0]) did not answer within \(formatSeconds(timeout))\(said)") }
            if let signal = outcome.signal { return CustomCheckResult(passed: false, detail: "\(command[0]) was killed by signal \(signal)\(said)") }
            return CustomCheckResult(passed: false, detail: "\(command[0]) exited with status \(outcome.exitStatus ?? -1)\(said)")
        } catch {
            return CustomCheckResult(passed: false, detail: "\(error)")
        }
    }
}

/// A closure that belongs to one event loop's thread, carried through other threads only to be
/// posted back to that loop and called there.
final class OnLoop<Argument>: @unchecked Sendable {
    private let body: (Argument) -> Void

    init(_ body: @escaping (Argument) -> Void) {
        self.body = body
    }

    func call(_ argument: Argument) {
        body(argument)
    }
}
