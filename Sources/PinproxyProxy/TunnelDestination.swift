import Foundation
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy

extension ClientConnection {
    /// Transparent step 2 for a `mode = "tunnel"` entry. Nothing will verify the upstream, so its
    /// destination is bound to the name the client sent, as Squid's `host_verify_strict` does:
    /// the original destination must be one of the addresses that name resolves to (`[resolve]`,
    /// else DNS off the loop within `dns_timeout`), or the client could reach any address by
    /// sending a tunnel host's SNI. Else, and for a ClientHello that hides its name (ECH):
    /// `destination-mismatch`, before any connect. Then the connect, to the original destination.
    func routeTransparentTunnel(_ hello: ClientHello, to original: SocketAddress, for destination: Destination) {
        if let (reason, detail) = tunnelRefusal(hello, for: destination) { return refuse(reason, detail, for: destination) }
        switch destination.host {
        case .ip(let address):
            bindTunnel(to: original, resolved: [address], hello: hello, for: destination)
        case .name(let name):
            if let configured = config.resolve[name] { return bindTunnel(to: original, resolved: configured, hello: hello, for: destination) }
            let timer = io.timer(after: config.proxy.dnsTimeout, repeats: false) { [weak self] in self?.tunnelDNSTimedOut() }
            let request = io.resolve(name) { [weak self] result in self?.tunnelResolved(result) }
            enter(.bindingTunnel(destination, original: original, hello, request, timer: timer))
        }
    }

    private func tunnelDNSTimedOut() {
        guard case .bindingTunnel(let destination, _, _, _, _) = state else { return unexpected("the tunnel's DNS timer") }
        refuse(.dnsFailure, "no DNS answer for \(destination.host) within \(formatSeconds(config.proxy.dnsTimeout)), so its tunnel cannot be bound to it")
    }

    private func tunnelResolved(_ result: Result<[IPAddress], DNSFailure>) {
        guard case .bindingTunnel(let destination, let original, let hello, _, _) = state else { return unexpected("a tunnel's DNS answer") }
        switch result {
        case .success(let addresses): bindTunnel(to: original, resolved: addresses, hello: hello, for: destination)
        case .failure(let failure): refuse(.dnsFailure, "\(destination.host) does not resolve (\(failure)), so its tunnel cannot be bound to it")
        }
    }

    private func bindTunnel(to original: SocketAddress, resolved: [IPAddress], hello: ClientHello, for destination: Destination) {
        guard resolved.contains(original.address) else {
            let listed = resolved.map(\.description).joined(separator: ", ")
            return refuse(.destinationMismatch, "the client went to \(original.address), which is not among the addresses \(destination.host) resolves to for pinproxy (\(listed)): \(destination.entry.name) has mode = \"tunnel\", and nothing verifies a tunnel's peer; nothing was relayed",
                          for: destination)
        }
        checkDestinations([original.address], for: destination, transparent: hello)
    }
}
