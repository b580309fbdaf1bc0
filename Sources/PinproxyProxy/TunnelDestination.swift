import Foundation
import PinproxyInterop
import PinproxyPolicy

extension ClientConnection {
    /// Transparent step 2 for an entry whose admission proves nothing about the name
    /// (`NameAuthentication`: `mode = "tunnel"`, `action = "allow-insecure"`, …). The client
    /// chose both the name (its SNI) and the address (its original destination), so the
    /// destination is bound to the name, as Squid's `host_verify_strict` does: the original
    /// destination must be one of the addresses that name resolves to (`[resolve]`, else DNS
    /// off the loop within `dns_timeout`), or the client could reach any address by sending
    /// the SNI of a host it may use. Else, and for a tunnel's ClientHello that hides its name
    /// (ECH): `destination-mismatch`, before any connect. Then the connect, to the original
    /// destination.
    func bindToName(_ hello: ClientHello, to original: SocketAddress, for destination: Destination) {
        if destination.entry.policy.mode == .tunnel, let (reason, detail) = tunnelRefusal(hello, for: destination) {
            return refuse(reason, detail, for: destination)
        }
        switch destination.host {
        case .ip(let address):
            bindName(to: original, resolved: [address], hello: hello, for: destination)
        case .name(let name):
            if let configured = config.resolve[name] { return bindName(to: original, resolved: configured, hello: hello, for: destination) }
            let timer = io.timer(after: config.proxy.dnsTimeout, repeats: false) { [weak self] in self?.bindingDNSTimedOut() }
            let request = io.resolve(name) { [weak self] result in self?.bindingResolved(result) }
            enter(.bindingTunnel(destination, original: original, hello, request, timer: timer))
        }
    }

    private func bindingDNSTimedOut() {
        guard case .bindingTunnel(let destination, _, _, _, _) = state else { return unexpected("the name binding's DNS timer") }
        refuse(.dnsFailure, "no DNS answer for \(destination.host) within \(formatSeconds(config.proxy.dnsTimeout)), so the connection cannot be bound to it")
    }

    private func bindingResolved(_ result: Result<[IPAddress], DNSFailure>) {
        guard case .bindingTunnel(let destination, let original, let hello, _, _) = state else { return unexpected("a name binding's DNS answer") }
        switch result {
        case .success(let addresses): bindName(to: original, resolved: addresses, hello: hello, for: destination)
        case .failure(let failure): refuse(.dnsFailure, "\(destination.host) does not resolve (\(failure)), so the connection cannot be bound to it")
        }
    }

    private func bindName(to original: SocketAddress, resolved: [IPAddress], hello: ClientHello, for destination: Destination) {
        guard resolved.contains(original.address) else {
            let listed = resolved.map(\.description).joined(separator: ", ")
            let why = NameAuthentication.of(destination.entry.policy.settings, at: Date()).why
            return refuse(.destinationMismatch, "the client went to \(original.address), which is not among the addresses \(destination.host) resolves to for pinproxy (\(listed)): \(destination.entry.name) \(why); nothing was relayed",
                          for: destination)
        }
        checkDestinations([original.address], for: destination, transparent: hello)
    }
}
