import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import PinproxyService

/// Finds out who a worker's clients are (`ClientIdentity`). On the loop, what never blocks:
/// whether the peer is one of this host's addresses, then the owner of the client's socket by
/// its exact 4-tuple (`SocketDiagnostics`: one netlink round trip, a few microseconds). What can
/// block (the user's name, the unit, the program) comes from `IdentityLookups`' caches, or is
/// looked up off the loop. One per worker, used on its loop only.
final class ClientIdentifier {
    /// How identifying a client began.
    enum Start {
        /// Known at once: remote, unknown, or a local client whose parts were all cached.
        case known(ClientIdentity)
        /// A local client whose remaining parts are being looked up off the loop.
        case pending(PendingIdentity)
    }

    private let lookups: IdentityLookups
    private let diagnostics: Result<SocketDiagnostics, SystemError>
    private var hostAddresses: Set<IPAddress> = []

    init(lookups: IdentityLookups) {
        self.lookups = lookups
        diagnostics = Result { () throws(SystemError) in try SocketDiagnostics() }
    }

    /// Starts identifying the client at `peer`, connected to `ourEnd` (the address its socket
    /// is connected to). What is looked up off the loop arrives in `done`, on `loop`.
    func start(peer: SocketAddress?, ourEnd: SocketAddress?, needsExecutable: Bool, deadline: TimeInterval,
               on loop: EventLoop, metrics: ProxyMetrics, done: @escaping (IdentityLookups.Parts) -> Void) -> Start {
        guard let peer, let ourEnd else { return .known(.unknown(why: "its address is not known")) }
        guard isOnThisHost(peer.address) else { return .known(.remote) }
        let owner: SocketOwner
        switch diagnostics {
        case .failure(let error):
            metrics.clientLookup(found: false)
            return .known(.unknown(why: "socket diagnostics are not available: \(error)"))
        case .success(let diagnostics):
            do throws(SystemError) {
                guard let found = try diagnostics.lookUp(local: peer, remote: ourEnd) else {
                    metrics.clientLookup(found: false)
                    return .known(.unknown(why: "the kernel has no socket \(peer) connected to \(ourEnd): the client left"))
                }
                owner = found
            } catch {
                metrics.clientLookup(found: false)
                return .known(.unknown(why: "socket diagnostics failed: \(error)"))
            }
        }
        guard owner.isEstablished, owner.inode != 0 else {
            metrics.clientLookup(found: false)
            let why = owner.isEstablished ? "no process holds its socket any more" : "its socket is no longer established (TCP state \(owner.state))"
            return .known(.unknown(why: why))
        }
        metrics.clientLookup(found: true)
        var pending = PendingIdentity(owner: owner, user: lookups.cachedName(of: owner.uid),
                                      unit: owner.cgroupID.map { lookups.cachedUnit(of: $0) } ?? .some(nil))
        if !needsExecutable, let user = pending.user, let unit = pending.unit {
            return .known(.local(LocalClient(uid: owner.uid, user: user, unit: unit)))
        }
        let started = lookups.lookUp(owner, name: pending.user == nil, unit: pending.unit == nil, executable: needsExecutable,
                                     deadline: deadline, on: loop, done: done)
        guard started else {
            pending.overloaded = true
            return .known(pending.identityWithoutLookups)
        }
        return .pending(pending)
    }

    /// Loopback, or an address of this host's interfaces (listed again when an address is not
    /// among those listed last: it may be new).
    private func isOnThisHost(_ address: IPAddress) -> Bool {
        let address = address.unmapped
        if HostAddresses.isLoopback(address) || hostAddresses.contains(address) { return true }
        hostAddresses = HostAddresses.current()
        return hostAddresses.contains(address)
    }
}

/// A local client whose socket was found, while what can block is looked up off the loop.
struct PendingIdentity {
    let owner: SocketOwner
    /// From the cache, or nil until looked up.
    var user: String??
    /// From the cache (`.some(nil)`: no system unit), or nil until looked up.
    var unit: String??
    /// Too many lookups were waiting: none was started.
    var overloaded = false

    /// The identity once `parts` arrived.
    func identity(with parts: IdentityLookups.Parts) -> ClientIdentity {
        if let unit { return .local(LocalClient(uid: owner.uid, user: user ?? parts.user, unit: unit, exe: parts.exe)) }
        switch parts.unit {
        case .unit(let unit): return .local(LocalClient(uid: owner.uid, user: user ?? parts.user, unit: unit, exe: parts.exe))
        case .noUnit: return .local(LocalClient(uid: owner.uid, user: user ?? parts.user, exe: parts.exe))
        case .unknown(let why): return .partlyKnown(LocalClient(uid: owner.uid, user: user ?? parts.user, exe: parts.exe), missing: "its unit cannot be told: \(why)")
        case nil: return unknownUnit(user: user ?? parts.user)
        }
    }

    /// The identity when `client_identity_timeout` passed first (or nothing is coming): a unit
    /// not found makes the client partly known, so that a slow lookup never skips a `unit:` section;
    /// the name and the program are best effort.
    var identityWithoutLookups: ClientIdentity {
        guard let unit else { return unknownUnit(user: user ?? nil) }
        return .local(LocalClient(uid: owner.uid, user: user ?? nil, unit: unit))
    }

    /// Its unit is not known: partly known, so that it fails closed (`ClientPolicy.decide`).
    private func unknownUnit(user: String?) -> ClientIdentity {
        .partlyKnown(LocalClient(uid: owner.uid, user: user),
                     missing: overloaded ? "too many identity lookups are waiting" : "the unit of cgroup \(owner.cgroupID ?? 0) was not found in time")
    }
}
