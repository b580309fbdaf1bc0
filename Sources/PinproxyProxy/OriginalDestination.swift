import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy

extension ClientConnection {
    /// Original destination (transparent listener): the destination of a redirected client
    /// (identified and admitted next, `Admit.swift`). The host is its SNI (or, without one, the
    /// address it connected to, when an entry names that address); the port and, unless
    /// `[resolve]` names the host, the address are its original destination (the client's own
    /// DNS answer). The checks of a CONNECT follow (`allow_ports`, the entry's ports,
    /// `block_private_destinations`), then the connect, offering the client's own ALPN list.
    ///
    /// Refused as `capture-loop`: a connection that is not a redirected one (made straight to
    /// the listener: its original destination is the listener, or conntrack knows none), so
    /// that the listener is no open relay. A connection from one of the daemon's own upstream
    /// sockets (its user is not exempt from the egress lock) is closed at once, and that
    /// upstream's own connection is refused instead: the loop ends after one turn.
    func routeTransparent(_ hello: ClientHello, addresses: ConnectionAddresses) {
        if let client, io.ownUpstreams?.claimCaptured(peer: client) == true {
            return close()
        }
        let named = hello.serverName.flatMap(TargetHost.init)
        let original: SocketAddress
        switch addresses.original {
        case .success(let found) where found != addresses.local && !io.transparentListeners.contains(found):
            original = found
        case .success(let found):
            return refuseDirect("its original destination \(found) is the transparent listener itself", named: named, addresses: addresses)
        case .failure(let error):
            return refuseDirect("the kernel knows no original destination for it (\(error))", named: named, addresses: addresses)
        }
        let host: TargetHost
        if let serverName = hello.serverName {
            guard let named else {
                return refuse(.badRequest, "the client's SNI \"\(RefusalResponse.printable(serverName, limit: 255))\" is not a host name")
            }
            host = named
        } else {
            host = .ip(original.address)
            guard config.policies.lookup(host).pattern != nil else {
                return refuse(.noSNI, "the client sent no SNI, and no entry names the address it connected to (\(original.address))",
                              subject: (host, original.port, nil))
            }
        }
        identifyClient(.transparent(host: host, original: original, hello: hello))
    }

    /// A connection made straight to the transparent listener: refused inside its TLS, for
    /// the host it named (or the listener's address).
    private func refuseDirect(_ why: String, named: TargetHost?, addresses: ConnectionAddresses) {
        let detail = "\(why): the connection was made straight to the transparent listener, which relays only connections the egress lock redirects to it"
        guard let local = addresses.local else { return refuse(.captureLoop, detail) }
        refuse(.captureLoop, detail, subject: (named ?? .ip(local.address), local.port, nil))
    }
}
