import PinproxyCore
import PinproxyInterop
import Synchronization

/// The local addresses of the daemon's own upstream sockets, kept while a transparent listener
/// is on. A connection that arrives there from one of them is pinproxy's own upstream connection,
/// captured by the egress lock and sent back (its user is not exempt): a redirect loop, which
/// is cut there, never followed.
final class OwnUpstreams: Sendable {
    /// One upstream socket's entry, removed when the last reference to it goes (with the
    /// connection's upstream). `captured` is set by the transparent side that met it.
    final class Registration: Sendable {
        let address: SocketAddress
        private let registry: OwnUpstreams
        private let capturedFlag = Atomic<Bool>(false)

        fileprivate init(address: SocketAddress, registry: OwnUpstreams) {
            self.address = address
            self.registry = registry
        }

        /// Whether this socket's connection came back to the transparent listener.
        var captured: Bool { capturedFlag.load(ordering: .acquiring) }

        fileprivate func markCaptured() { capturedFlag.store(true, ordering: .releasing) }

        deinit { registry.remove(address, ifStill: ObjectIdentifier(self)) }
    }

    private struct WeakRegistration {
        weak var registration: Registration?
    }

    private let registrations = Locked<[SocketAddress: WeakRegistration]>([:])

    /// Registers the connected upstream `socket` by its local address; nil when it has none.
    func register(_ socket: Int32) -> Registration? {
        guard let address = SocketAddress.local(of: socket) else { return nil }
        let registration = Registration(address: address, registry: self)
        registrations.withLock { $0[address] = WeakRegistration(registration: registration) }
        return registration
    }

    /// Whether `peer` is one of the daemon's upstream sockets; if so, that upstream is marked
    /// captured, so that its own connection is refused as a loop too.
    func claimCaptured(peer: SocketAddress) -> Bool {
        guard let registration = registrations.withLock({ $0[peer]?.registration }) else { return false }
        registration.markCaptured()
        return true
    }

    private func remove(_ address: SocketAddress, ifStill identifier: ObjectIdentifier) {
        registrations.withLock { entries in
            // A newer socket may have the same address (after the port's reuse): it stays.
            guard let current = entries[address] else { return }
            if current.registration.map(ObjectIdentifier.init) ?? identifier == identifier { entries[address] = nil }
        }
    }
}
