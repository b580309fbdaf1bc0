import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy

extension ClientConnection {
    /// Admit (both listeners, once the client is identified): the one admission decision
    /// (`Admission.decide`) on the request, before any upstream work. Refused: the answer goes
    /// out. Admitted: a CONNECT's host is resolved, a transparent client's upstream is its
    /// original destination (or `[resolve]`). The name of a transparent client's entry whose
    /// admission does not authenticate it (`NameAuthentication`) is first resolved (`[resolve]`, else DNS off the loop within `dns_timeout`), as Squid's
    /// `host_verify_strict` does, and the decision taken again with the answer: nothing will
    /// verify that upstream, so its address must be one the name resolves to.
    func admit(_ request: ClientRequest, identity: ClientIdentity?) {
        switch request {
        case .connect(let target):
            decide(AdmissionRequest(host: target.host, port: target.port, route: .connect, client: identity), hello: nil)
        case .transparent(let host, let original, let hello):
            let route = AdmissionRequest.Route.transparent(original: original.address, hidesName: hello.offersEncryptedClientHello)
            decide(AdmissionRequest(host: host, port: original.port, route: route, client: identity), hello: hello)
        }
    }

    /// Takes the decision (counting the client's tunnels when a rule reads them) and goes on as
    /// it says; `resolution` is the name's addresses once the decision asked for them.
    private func decide(_ request: AdmissionRequest, hello: ClientHello?, resolution: [IPAddress]? = nil) {
        let decision: Admission.Decision
        if Admission.countsClientTunnels(config) {
            var request = request
            request.clientKey = ClientKey(identity: request.client, address: client?.address)
            decision = io.clientTunnels.admit(request.clientKey) { held in
                request.clientTunnels = held
                return Admission.decide(request, config: config, at: io.wallClock, resolution: resolution)
            }
            if case .admit = decision { countedAs = request.clientKey }
        } else {
            decision = Admission.decide(request, config: config, at: io.wallClock, resolution: resolution)
        }
        func destination(_ entry: PolicyEntry, _ client: ClientDecision) -> Destination {
            Destination(host: request.host, port: request.port, entry: entry, context: config.verdictContext, client: client)
        }
        switch decision {
        case .refuse(let refusal):
            if let verdict = refusal.verdict { return refuse(verdict: verdict, for: destination(refusal.entry, refusal.client)) }
            refuse(refusal.reason, refusal.detail, for: destination(refusal.entry, refusal.client))
        case .resolve(let name, let entry, let client):
            guard let hello else { return unexpected("a CONNECT's admission waiting for DNS") }
            let timer = io.timer(after: config.proxy.dnsTimeout, repeats: false) { [weak self] in self?.bindingDNSTimedOut() }
            let lookup = io.resolve(name) { [weak self] result in self?.bindingResolved(result) }
            enter(.bindingTunnel(destination(entry, client), request, hello, lookup, timer: timer))
        case .admit(let entry, let client, let addresses):
            guard let addresses else { return resolve(destination(entry, client)) }
            checkDestinations(addresses, for: destination(entry, client), transparent: hello)
        }
    }

    private func bindingDNSTimedOut() {
        guard case .bindingTunnel(let destination, _, _, _, _) = state else { return unexpected("the tunnel's DNS timer") }
        refuse(.dnsFailure, "no DNS answer for \(destination.host) within \(formatSeconds(config.proxy.dnsTimeout)), so its tunnel cannot be bound to it")
    }

    private func bindingResolved(_ result: Result<[IPAddress], DNSFailure>) {
        guard case .bindingTunnel(let destination, let request, let hello, _, _) = state else { return unexpected("a tunnel's DNS answer") }
        switch result {
        case .success(let addresses): decide(request, hello: hello, resolution: addresses)
        case .failure(let failure): refuse(.dnsFailure, "\(destination.host) does not resolve (\(failure)), so its tunnel cannot be bound to it")
        }
    }
}
