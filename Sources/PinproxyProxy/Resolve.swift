import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy

extension ClientConnection {
    /// Resolve: addresses from `[resolve]`, the IP literal itself, or DNS without blocking the
    /// loop (within `dns_timeout`); then, with `block_private_destinations`, only public
    /// addresses are kept.
    func resolve(_ destination: Destination) {
        switch destination.host {
        case .ip(let address):
            return checkDestinations([address], for: destination)
        case .name(let name):
            if let configured = config.resolve[name] { return checkDestinations(configured, for: destination) }
            let timer = io.timer(after: config.proxy.dnsTimeout, repeats: false) { [weak self] in self?.dnsTimedOut() }
            let request = io.resolve(name) { [weak self] result in self?.resolved(result) }
            enter(.resolving(destination, request, timer: timer))
        }
    }

    private func dnsTimedOut() {
        guard case .resolving(let destination, _, _) = state else { return unexpected("the DNS timer") }
        refuse(.dnsFailure, "no DNS answer for \(destination.host) within \(formatSeconds(config.proxy.dnsTimeout))", proxyError: .dnsTimeout)
    }

    private func resolved(_ result: Result<[IPAddress], DNSFailure>) {
        guard case .resolving(let destination, _, _) = state else { return unexpected("a DNS answer") }
        switch result {
        case .success(let addresses): checkDestinations(addresses, for: destination)
        case .failure(let failure): refuse(.dnsFailure, "\(destination.host) does not resolve: \(failure)")
        }
    }

    /// With `block_private_destinations`, only the public addresses go on to `connect`; `hello` is
    /// a transparent client's ClientHello.
    func checkDestinations(_ addresses: [IPAddress], for destination: Destination, transparent hello: ClientHello? = nil) {
        guard config.proxy.blockPrivateDestinations else { return connect(to: addresses, for: destination, transparent: hello) }
        let allowed = addresses.filter { !DestinationGuard.isPrivate($0) }
        guard !allowed.isEmpty else {
            let listed = addresses.map(\.description).joined(separator: ", ")
            return refuse(.destinationDenied, "\(destination.host) resolves only to private or special addresses (\(listed)) and block_private_destinations = true",
                          for: destination)
        }
        connect(to: allowed, for: destination, transparent: hello)
    }
}
