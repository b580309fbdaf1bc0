import Dispatch
import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy

/// What identifying a client needs that can block, for every worker: the user's name (NSS),
/// the cgroup's unit (/sys/fs/cgroup) and the program (/proc). Each runs on threads of its own,
/// never on an event loop: at most `concurrency` at once and `queueLimit` waiting (more are not
/// looked up at all). Names are cached for `nameLifetime`, units for good (a cgroup id is never
/// reused while the system runs), programs not at all (one socket each), though the processes
/// that held a user's sockets lately are tried first.
final class IdentityLookups: Sendable {
    /// What was looked up for one client.
    struct Parts: Sendable {
        var user: String?
        /// nil when the unit was not looked up (or not found in time).
        var unit: CgroupUnit?
        var exe: String?
    }

    private struct State {
        var names: [UInt32: (name: String?, expires: TimeInterval)] = [:]
        var units: [UInt64: String?] = [:]
        var holders: [UInt32: [Int32]] = [:]
        var waiting = 0
    }

    private let state = Locked(State())
    private let queue = DispatchQueue(label: "pinproxy.client-identity", attributes: .concurrent)
    private let slots: DispatchSemaphore
    private let queueLimit: Int
    /// Where the cgroup v2 hierarchy is mounted; nil: no unit is ever found.
    private let cgroupRoot: String?

    static let cacheLimit = 4096
    static let nameLifetime: TimeInterval = 300
    /// How many cgroups one walk for a unit reads at most (at any depth): past it, a cgroup
    /// not met yet is unknown.
    static let unitWalkLimit = 100_000

    init(concurrency: Int = 4, queueLimit: Int = 256, cgroupRoot: String? = CgroupTree.root()) {
        slots = DispatchSemaphore(value: concurrency)
        self.queueLimit = queueLimit
        self.cgroupRoot = cgroupRoot
    }

    /// The cached name of `uid`: nil when not cached, `.some(nil)` when it has none.
    func cachedName(of uid: UInt32) -> String?? {
        let now = ProcessLimits.monotonicSeconds()
        return state.withLock { state in state.names[uid].flatMap { $0.expires > now ? .some($0.name) : nil } }
    }

    /// The cached unit of cgroup `id`: nil when not cached, `.some(nil)` when it is no system unit.
    func cachedUnit(of id: UInt64) -> String?? {
        state.withLock { $0.units[id] }
    }

    /// Looks up off the loop what `missing` names for the owner of a socket, then calls `done`
    /// on `loop`; false (and `done` is never called) when `queueLimit` lookups already wait.
    func lookUp(_ owner: SocketOwner, name: Bool, unit: Bool, executable: Bool, deadline: TimeInterval,
                on loop: EventLoop, done: @escaping (Parts) -> Void) -> Bool {
        let admitted = state.withLock { state in
            guard state.waiting < queueLimit else { return false }
            state.waiting += 1
            return true
        }
        guard admitted else { return false }
        let done = OnLoop(done)
        queue.async { [self] in
            slots.wait()
            var parts = Parts()
            if name { parts.user = lookUpName(owner.uid) }
            if unit, let id = owner.cgroupID { parts.unit = lookUpUnit(id) }
            if executable { parts.exe = lookUpExecutable(owner, deadline: deadline) }
            slots.signal()
            state.withLock { $0.waiting -= 1 }
            let found = parts
            loop.post { done.call(found) }
        }
        return true
    }

    private func lookUpName(_ uid: UInt32) -> String? {
        let name: String?
        switch UserDatabase.name(ofUID: uid) {
        case .found(let found): name = found
        case .missing: name = nil
        case .failed: return nil  // not cached: the next client asks again
        }
        let expires = ProcessLimits.monotonicSeconds() + Self.nameLifetime
        state.withLock { state in
            if state.names.count >= Self.cacheLimit { state.names.removeAll() }
            state.names[uid] = (name, expires)
        }
        return name
    }

    /// Walks /system.slice, then the rest of the hierarchy, until it meets cgroup `id`; caches
    /// the unit of every cgroup it saw below a service, and the answer for `id` when it is
    /// settled. An unknown answer (bound, a cgroup that vanished or could not be read, `id`
    /// nowhere) is not cached: the next client's walk asks again.
    private func lookUpUnit(_ id: UInt64) -> CgroupUnit {
        if let cached = cachedUnit(of: id) { return cached.map(CgroupUnit.unit) ?? .noUnit }
        guard let cgroupRoot else { return .unknown(why: "no cgroup v2 hierarchy is mounted") }
        let walk = CgroupTree.walk(root: cgroupRoot, first: "/system.slice", until: id, limit: Self.unitWalkLimit)
        let answer = CgroupUnit.of(cgroup: id, after: walk)
        var found: [UInt64: String] = [:]
        for cgroup in walk.cgroups {
            if let unit = SystemUnit.name(ofCgroup: cgroup.path) { found[cgroup.id] = unit }
        }
        state.withLock { state in
            if state.units.count + found.count >= Self.cacheLimit { state.units.removeAll() }
            for (cgroup, unit) in found.prefix(Self.cacheLimit) { state.units[cgroup] = unit }
            switch answer {
            case .unit(let unit): state.units[id] = unit
            case .noUnit: state.units[id] = .some(nil)
            case .unknown: break
            }
        }
        return answer
    }

    private func lookUpExecutable(_ owner: SocketOwner, deadline: TimeInterval) -> String? {
        let hints = state.withLock { $0.holders[owner.uid] ?? [] }
        guard let holder = ProcessExecutables.holder(ofSocket: owner.inode, uid: owner.uid, hints: hints, deadline: deadline) else { return nil }
        state.withLock { state in
            if state.holders.count >= Self.cacheLimit { state.holders.removeAll() }
            state.holders[owner.uid] = Array(([holder.pid] + hints.filter { $0 != holder.pid }).prefix(8))
        }
        return holder.executable
    }
}
