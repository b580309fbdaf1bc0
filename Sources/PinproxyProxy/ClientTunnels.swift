import PinproxyCore
import PinproxyInterop
import PinproxyPolicy

/// The tunnels each client holds (`ClientKey`), while a rule reads them (`Admission.countsClientTunnels`): counted
/// from admission to close, across workers.
final class ClientTunnels: Sendable {
    private let held = Locked([ClientKey: Int]())

    /// Runs `decide` with what `key` holds now and counts one more tunnel if it admits, in one
    /// step: two workers cannot both take the last place.
    func admit(_ key: ClientKey, _ decide: (Int) -> Admission.Decision) -> Admission.Decision {
        held.withLock { held in
            let decision = decide(held[key, default: 0])
            if case .admit = decision { held[key, default: 0] += 1 }
            return decision
        }
    }

    /// A tunnel of `key` has closed.
    func release(_ key: ClientKey) {
        held.withLock { held in
            guard let count = held[key] else { return }
            held[key] = count > 1 ? count - 1 : nil
        }
    }

    /// How many tunnels `key` holds.
    func count(_ key: ClientKey) -> Int {
        held.withLock { $0[key, default: 0] }
    }
}
