import Dispatch
import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy

/// Runs entries' `verify_command`s for the workers: never on an event loop. At most
/// `concurrency` commands run at once, at most `queueLimit` wait (more are refused at once as
/// `custom-check`), each is killed after its timeout, and the answers of commands that exited
/// are cached for the cache time of the config the connection runs under. A cached answer
/// belongs to one loaded entry (a reload forgets them all) and to one client identity, which
/// the command is told.
public final class CustomChecks: Sendable {
    /// What an answer is cached under: the entry as loaded (a reload makes new entries), host,
    /// port, command, the verified chain's certificate digests and the client the command is
    /// told of (its `PINPROXY_CLIENT*` variables).
    struct Key: Hashable, Sendable {
        let entry: PolicyEntry
        let host: String
        let port: UInt16
        let command: [String]
        let chain: [[UInt8]]
        let client: [String: String]

        static func == (left: Key, right: Key) -> Bool {
            left.entry === right.entry && left.host == right.host && left.port == right.port
                && left.command == right.command && left.chain == right.chain && left.client == right.client
        }

        func hash(into hasher: inout Hasher) {
            hasher.combine(ObjectIdentifier(entry))
            hasher.combine(host)
            hasher.combine(port)
            hasher.combine(command)
            hasher.combine(chain)
            hasher.combine(client)
        }
    }

    /// The answer of one run, and whether the command exited by itself: only such answers are
    /// cached, never a timeout, a kill or a failure to start it.
    struct Answer: Sendable {
        let result: CustomCheckResult
        let exited: Bool
    }

    private struct State {
        var cache: [Key: (result: CustomCheckResult, expires: TimeInterval)] = [:]
        /// Bumped when the cache is forgotten: a run that began before never stores its answer.
        var generation = 0
        var waiting = 0
    }

    private let state = Locked<State>(State())
    private let slots: DispatchSemaphore
    private let queue = DispatchQueue(label: "pinproxy.verify-command", attributes: .concurrent)
    private let queueLimit: Int

    /// Most answers cached; at the limit, expired ones are dropped, and new ones are not kept
    /// while none has expired.
    static let cacheLimit = 10_000

    init(concurrency: Int, queueLimit: Int = 256) {
        slots = DispatchSemaphore(value: max(1, concurrency))
        self.queueLimit = queueLimit
    }

    /// Checks `chain` (the verified chain, leaf first) for `host`:`port` with `entry`'s
    /// `command`, telling it of `client`, and calls `done` on `loop` with the answer. A
    /// `cacheSeconds` of 0 never reads the cache.
    func check(_ command: [String], entry: PolicyEntry, chain: [Certificate], host: TargetHost, port: UInt16,
               client: ClientIdentity?, timeout: TimeInterval, cacheSeconds: TimeInterval, on loop: EventLoop,
               done: @escaping (CustomCheckResult) -> Void) {
        let done = OnLoop(done)
        let name = host.description.trimmingBrackets()
        let key = Key(entry: entry, host: name, port: port, command: command, chain: chain.map(\.certificateSHA256),
                      client: Self.environment(for: client))
        let now = ProcessLimits.monotonicSeconds()
        let admitted: (cached: CustomCheckResult?, generation: Int) = state.withLock { state in
            if cacheSeconds > 0, let hit = state.cache[key], hit.expires > now { return (hit.result, state.generation) }
            guard state.waiting < queueLimit else {
                return (CustomCheckResult(passed: false, detail: "verify_command was not run: \(queueLimit) checks are already waiting"), state.generation)
            }
            state.waiting += 1
            return (nil, state.generation)
        }
        if let cached = admitted.cached { return loop.post { done.call(cached) } }
        let input = Array(chain.map(\.pem).joined().utf8)
        queue.async { [self] in
            slots.wait()
            let answer = Self.answer(command, host: name, port: port, client: key.client, input: input, timeout: timeout)
            slots.signal()
            let expires = ProcessLimits.monotonicSeconds() + cacheSeconds
            state.withLock { state in
                state.waiting -= 1
                guard answer.exited, cacheSeconds > 0, state.generation == admitted.generation else { return }
                if state.cache.count >= Self.cacheLimit { state.cache = state.cache.filter { $0.value.expires > expires - cacheSeconds } }
                if state.cache.count < Self.cacheLimit { state.cache[key] = (answer.result, expires) }
            }
            loop.post { done.call(answer.result) }
        }
    }

    /// Forgets every cached answer, and every answer of a run under way: at each reload.
    func forgetAnswers() {
        state.withLock { state in
            state.cache.removeAll()
            state.generation += 1
        }
    }

    /// What the command is told about the client: `PINPROXY_CLIENT` (`local`, `unknown`,
    /// `remote` or `forwarded`, with `PINPROXY_CLIENT_ADDRESS`) and, for a local one, `PINPROXY_CLIENT_UID`, `_USER`, `_UNIT` and `_EXE` as far
    /// as they are known. Nothing without `[clients]`.
    public static func environment(for client: ClientIdentity?) -> [String: String] {
        switch client {
        case nil: return [:]
        case .unknown: return ["PINPROXY_CLIENT": "unknown"]
        case .remote: return ["PINPROXY_CLIENT": "remote"]
        case .forwarded(let address): return ["PINPROXY_CLIENT": "forwarded", "PINPROXY_CLIENT_ADDRESS": address.description]
        case .local(let local), .partlyKnown(let local, _):
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
        answer(command, host: host, port: port, client: client, input: input, timeout: timeout).result
    }

    static func answer(_ command: [String], host: String, port: UInt16, client: [String: String] = [:], input: [UInt8],
                       timeout: TimeInterval) -> Answer {
        let environment = ["PINPROXY_HOST": host, "PINPROXY_PORT": String(port),
                           "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"].merging(client) { first, _ in first }
        let outcome: ChildProcess.Outcome
        do {
            outcome = try ChildProcess.run(command, environment: environment, input: input, timeout: timeout)
        } catch {
            return Answer(result: CustomCheckResult(passed: false, detail: "\(error)"), exited: false)
        }
        let said = outcome.firstErrorLine.map { ": \($0)" } ?? ""
        if outcome.timedOut {
            return Answer(result: CustomCheckResult(passed: false, detail: "\(command[0]) timed out: did not answer within \(formatSeconds(timeout))\(said)"), exited: false)
        }
        guard let status = outcome.exitStatus else {
            let signal = outcome.signal.map { " by signal \($0)" } ?? ""
            return Answer(result: CustomCheckResult(passed: false, detail: "\(command[0]) was killed\(signal)\(said)"), exited: false)
        }
        if status == 0 { return Answer(result: CustomCheckResult(passed: true, detail: ""), exited: true) }
        return Answer(result: CustomCheckResult(passed: false, detail: "\(command[0]) exited with status \(status)\(said)"), exited: true)
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
