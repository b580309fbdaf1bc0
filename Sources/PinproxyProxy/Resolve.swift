import Foundation
import PinproxyInterop
import PinproxyPolicy

extension ClientConnection {
    /// Step 4: addresses from `[resolve]`, the IP literal itself, or DNS without blocking the
    /// loop; then, with `block_private_destinations`, only public addresses are kept.
    func resolve() {
        guard let (host, _) = target else { return }
        phase = .resolving
        switch host {
        case .ip(let address):
            return checkDestinations([address])
        case .name(let name):
            if let configured = config.resolve[name] { return checkDestinations(configured) }
            phaseTimer = Timer(loop: worker.loop, after: config.proxy.dnsTimeout) { [weak self] in
                self?.dnsRequest?.cancel()
                self?.refuse(.dnsFailure, "no DNS answer for \(name) within \(formatSeconds(self?.config.proxy.dnsTimeout ?? 0))")
            }
            dnsRequest = worker.loop.dns.resolve(name) { [weak self] result in
                guard let self, self.phase == .resolving else { return }
                self.phaseTimer = nil
                self.dnsRequest = nil
                switch result {
                case .success(let addresses): self.checkDestinations(addresses)
                case .failure(let failure): self.refuse(.dnsFailure, "\(name) does not resolve: \(failure)")
                }
            }
        }
    }

    func checkDestinations(_ addresses: [IPAddress]) {
        guard config.proxy.blockPrivateDestinations else { return connect(to: addresses) }
        let allowed = addresses.filter { !DestinationGuard.isPrivate($0) }
        guard !allowed.isEmpty else {
            let listed = addresses.map(\.description).joined(separator: ", ")
            return refuse(.destinationDenied, "\(target!.0) resolves only to private or special addresses (\(listed)) and block_private_destinations = true")
        }
        connect(to: allowed)
    }
}

/// Which destination addresses `block_private_destinations` refuses.
public enum DestinationGuard {
    /// True for every address of the IANA IPv4 and IPv6 special-purpose registries, multicast
    /// and reserved blocks, and IPv6 forms that embed such an IPv4 address: see
    /// `IPAddress.specialPurposeBlock`.
    public static func isPrivate(_ address: IPAddress) -> Bool {
        address.specialPurposeBlock != nil
    }
}
