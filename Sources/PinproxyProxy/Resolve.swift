import Foundation
import PinproxyInterop
import PinproxyPolicy

extension ClientConnection {
    /// Step 4: addresses from `[resolve]`, the IP literal itself, or DNS without blocking the
    /// loop (within `dns_timeout`); then, with `block_private_destinations`, only public
    /// addresses are kept.
    func resolve(_ destination: Destination) {
        switch destination.host {
        case .ip(let address):
            return checkDestinations([address], for: destination)
        case .name(let name):
            if let configured = config.resolve[name] { return checkDestinations(configured, for: destination) }
            let timer = LoopTimer(loop: worker.loop, after: config.proxy.dnsTimeout) { [weak self] in self?.dnsTimedOut() }
            let request = worker.loop.dns.resolve(name) { [weak self] result in self?.resolved(result) }
            enter(.resolving(destination, request, timer: timer))
        }
    }

    private func dnsTimedOut() {
        guard case .resolving(let destination, _, _) = state else { return unexpected("the DNS timer") }
        refuse(.dnsFailure, "no DNS answer for \(destination.host) within \(formatSeconds(config.proxy.dnsTimeout))")
    }

    private func resolved(_ result: Result<[IPAddress], DNSFailure>) {
        guard case .resolving(let destination, _, _) = state else { return unexpected("a DNS answer") }
        switch result {
        case .success(let addresses): checkDestinations(addresses, for: destination)
        case .failure(let failure): refuse(.dnsFailure, "\(destination.host) does not resolve: \(failure)")
        }
    }

    private func checkDestinations(_ addresses: [IPAddress], for destination: Destination) {
        guard config.proxy.blockPrivateDestinations else { return connect(to: addresses, for: destination) }
        let allowed = addresses.filter { !DestinationGuard.isPrivate($0) }
        guard !allowed.isEmpty else {
            let listed = addresses.map(\.description).joined(separator: ", ")
            return refuse(.destinationDenied, "\(destination.host) resolves only to private or special addresses (\(listed)) and block_private_destinations = true",
                          for: destination)
        }
        connect(to: allowed, for: destination)
    }
}

/// Which destination addresses `block_private_destinations` refuses.
public enum DestinationGuard {
    /// True for loopback, RFC 1918, link-local, CGNAT, unique-local, unspecified, multicast,
    /// reserved and broadcast addresses, local NAT64, Teredo, discard and documentation
    /// prefixes, and for IPv6 forms that embed such an IPv4 address (IPv4-mapped, SIIT,
    /// IPv4-compatible, NAT64, 6to4).
    public static func isPrivate(_ address: IPAddress) -> Bool {
        let b = address.bytes
        if !address.isIPv6 { return isPrivateV4(b) }
        if b[0..<10].allSatisfy({ $0 == 0 }) && b[10] == 0xFF && b[11] == 0xFF { return isPrivateV4(Array(b[12..<16])) }   // ::ffff:a.b.c.d
        if b[0..<12].allSatisfy({ $0 == 0 }) { return true }                                                               // ::, ::1, ::a.b.c.d
        if b[0..<8].allSatisfy({ $0 == 0 }) && b[8] == 0xFF && b[9] == 0xFF && b[10] == 0 && b[11] == 0 {                 // ::ffff:0:a.b.c.d (SIIT)
            return isPrivateV4(Array(b[12..<16]))
        }
        if b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xFF && b[3] == 0x9B && b[4..<12].allSatisfy({ $0 == 0 }) {             // 64:ff9b::/96
            return isPrivateV4(Array(b[12..<16]))
        }
        if b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xFF && b[3] == 0x9B && b[4] == 0 && b[5] == 1 { return true }          // 64:ff9b:1::/48, local NAT64
        if b[0] == 0x01 && b[1] == 0x00 && b[2..<8].allSatisfy({ $0 == 0 }) { return true }                                // 100::/64 discard
        if b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0 { return true }                                          // 2001::/32 Teredo
        if b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0D && b[3] == 0xB8 { return true }                                    // 2001:db8::/32 documentation
        if b[0] == 0x20 && b[1] == 0x02 { return isPrivateV4(Array(b[2..<6])) }                                            // 2002::/16
        if b[0] & 0xFE == 0xFC { return true }                                                                             // fc00::/7
        if b[0] == 0xFE && b[1] & 0xC0 == 0x80 { return true }                                                             // fe80::/10
        if b[0] == 0xFE && b[1] & 0xC0 == 0xC0 { return true }                                                             // fec0::/10
        if b[0] == 0xFF { return true }                                                                                    // ff00::/8
        return false
    }

    static func isPrivateV4(_ b: [UInt8]) -> Bool {
        switch (b[0], b[1]) {
        case (0, _), (10, _), (127, _): return true
        case (100, 64...127): return true          // CGNAT
        case (169, 254): return true               // link-local
        case (172, 16...31): return true
        case (192, 168): return true
        case (192, 0) where b[2] == 0: return true // IETF protocol assignments
        case (198, 18...19): return true           // benchmarking
        case (224...255, _): return true           // multicast, reserved, broadcast
        default: return false
        }
    }
}
