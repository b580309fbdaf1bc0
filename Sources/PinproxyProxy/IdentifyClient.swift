import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy

/// What a connection asks for while its client is identified: a CONNECT's target, or a
/// transparent client's host, original destination and ClientHello (kept buffered).
enum ClientRequest {
    case connect(RequestTarget)
    case transparent(host: TargetHost, original: SocketAddress, hello: ClientHello)

    var host: TargetHost {
        switch self {
        case .connect(let target): target.host
        case .transparent(let host, _, _): host
        }
    }

    var isTransparent: Bool {
        if case .transparent = self { true } else { false }
    }

    var port: UInt16 {
        switch self {
        case .connect(let target): target.port
        case .transparent(_, let original, _): original.port
        }
    }
}

extension ClientConnection {
    /// Identify the client, when a rule of the admission reads it (`Admission.needsClientIdentity`)
    /// (`ClientIdentifier`): its socket's owner at once, then, off the loop within
    /// `client_identity_timeout`, what can block. The client's socket is connected to this end
    /// of the connection, or, on the transparent listener, to the original destination.
    /// Nothing the client sent takes part. Otherwise nothing is looked up. Then admit.
    func identifyClient(_ request: ClientRequest) {
        guard Admission.needsClientIdentity(config) else { return admit(request, identity: nil) }
        let clientsEnd: SocketAddress? = switch request {
        case .connect: ourEnd
        case .transparent(_, let original, _): original
        }
        let timeout = config.proxy.clientIdentityTimeout
        let start = io.identify(peer: client, ourEnd: clientsEnd, needsExecutable: config.clients.needsExecutable,
                                deadline: io.now + timeout) { [weak self] parts in self?.identityLookedUp(parts) }
        switch start {
        case .known(.remote) where request.isTransparent:
            // routeTransparent refused every connection made straight to the transparent
            // listener: a peer of another host there was redirected by the egress lock's
            // forward_interfaces rules, so this host forwards its traffic.
            admit(request, identity: client.map { ClientIdentity.forwarded($0.address.unmapped) } ?? .remote)
        case .known(let identity):
            admit(request, identity: identity)
        case .pending(let pending):
            let timer = io.timer(after: timeout, repeats: false) { [weak self] in self?.identityTimedOut() }
            enter(.identifying(request, pending, timer: timer))
        }
    }

    private func identityLookedUp(_ parts: IdentityLookups.Parts) {
        // The client may have left (or the deadline passed) meanwhile: then nothing waits for it.
        guard case .identifying(let request, let pending, _) = state else { return }
        admit(request, identity: pending.identity(with: parts))
    }

    private func identityTimedOut() {
        guard case .identifying(let request, let pending, _) = state else { return unexpected("the client identity timer") }
        admit(request, identity: pending.identityWithoutLookups)
    }
}
