import FoundationEssentials
import PinproxyCore

/// What the admission decision knows of a request before any upstream work: the host and port
/// it asks for, how it came (a CONNECT, or a connection the egress lock redirected), who the
/// client is, and how many tunnels that client holds.
public struct AdmissionRequest: Sendable {
    /// How the request came, with what that way brings.
    public enum Route: Sendable, Equatable {
        /// A CONNECT: the upstream is the host's, resolved once admitted.
        case connect
        /// The transparent listener: the upstream is the client's original destination
        /// (`original`); `hidesName` says its ClientHello carries `encrypted_client_hello`.
        case transparent(original: IPAddress, hidesName: Bool)
    }

    public var host: TargetHost
    public var port: UInt16
    public var route: Route
    /// Who the client is; nil when nothing was looked up (no `[clients]`, no per-client limit).
    public var client: ClientIdentity?
    /// Who the client counts as for `max_tunnels_per_client`.
    public var clientKey: ClientKey
    /// The tunnels that client holds now, this one not counted.
    public var clientTunnels: Int

    public init(host: TargetHost, port: UInt16, route: Route, client: ClientIdentity?, clientKey: ClientKey = .unknown, clientTunnels: Int = 0) {
        self.host = host
        self.port = port
        self.route = route
        self.client = client
        self.clientKey = clientKey
        self.clientTunnels = clientTunnels
    }
}

/// Who counts as one client for `max_tunnels_per_client`: a local client is its uid, a remote
/// (or forwarded) one its source address, and every unknown client shares one bucket.
public enum ClientKey: Hashable, Sendable, CustomStringConvertible {
    case uid(UInt32)
    case address(IPAddress)
    case unknown

    /// The key of a client with `identity` (nil: not looked up) connecting from `address`.
    public init(identity: ClientIdentity?, address: IPAddress?) {
        switch identity {
        case .local(let client), .partlyKnown(let client, _): self = .uid(client.uid)
        case .remote, .forwarded, nil: self = address.map { .address($0.unmapped) } ?? .unknown
        case .unknown: self = .unknown
        }
    }

    public var description: String {
        switch self {
        case .uid(let uid): "uid \(uid)"
        case .address(let address): "address \(address)"
        case .unknown: "the unknown clients"
        }
    }
}

/// The one decision on a request before any upstream work, which both listeners take from one
/// step of the connection (`Admit.swift`): `[clients]` (client-denied, first), the host's entry
/// or `[default]` (host-denied, port-denied), `max_tunnels_per_client` (client-limit), then,
/// on the transparent listener, where the upstream is: a name the entry's admission does not
/// authenticate (`NameAuthentication`: `mode = "tunnel"`, `allow-insecure`, …) is bound to its
/// resolution (destination-mismatch), which is asked for (`resolve`) and then given back as an
/// input, since the lookup is asynchronous. Pure: the request, the config, the time and the
/// resolution in, a decision out.
public enum Admission {
    /// What the admission decided.
    public enum Decision: Sendable {
        /// Go on: `entry` applies; the upstream is at `addresses` (nil: resolve the host first).
        case admit(entry: PolicyEntry, client: ClientDecision, addresses: [IPAddress]?)
        /// Refused, before any upstream work.
        case refuse(Refusal)
        /// The name's addresses are needed (to bind the upstream to them): decide again with
        /// them as `resolution`. `entry` and `client` are what the rules so far found.
        case resolve(String, entry: PolicyEntry, client: ClientDecision)
    }

    /// A refusal of the admission.
    public struct Refusal: Sendable {
        public let reason: RefusalReason
        public let detail: String
        public let entry: PolicyEntry
        public let client: ClientDecision
        /// The request's verdict, when the host's entry refused (host-denied, port-denied).
        public let verdict: Verdict?
    }

    /// Whether a rule under `config` reads who the client is (`[clients]`, a per-client
    /// limit): the connection identifies its client only then.
    public static func needsClientIdentity(_ config: Config) -> Bool {
        !config.clients.isEmpty || countsClientTunnels(config)
    }

    /// Whether a rule under `config` reads `AdmissionRequest.clientTunnels`: the tunnels each
    /// client holds are counted (from admission to close) only then.
    public static func countsClientTunnels(_ config: Config) -> Bool {
        config.proxy.maxTunnelsPerClient != nil
    }

    /// The decision on `request` under `config` at `time`; `resolution` is the host's addresses
    /// once `resolve` asked for them.
    public static func decide(_ request: AdmissionRequest, config: Config, at time: Date, resolution: [IPAddress]? = nil) -> Decision {
        let entry = config.policies.lookup(request.host)
        let client = request.client.map { ClientPolicy.decide(host: request.host, identity: $0, rules: config.clients) } ?? .notApplied
        func refuse(_ reason: RefusalReason, _ detail: String, verdict: Verdict? = nil) -> Decision {
            .refuse(Refusal(reason: reason, detail: detail, entry: entry, client: client, verdict: verdict))
        }
        if client.outcome == .refuse { return refuse(.clientDenied, client.detail) }
        if let verdict = TrustEvaluator.evaluateRequest(port: request.port, entry: entry), !verdict.allowsConnection,
           let reason = verdict.reason {
            return refuse(reason, verdict.failures.map(\.description).joined(separator: "; "), verdict: verdict)
        }
        if let tunnelLimit = config.proxy.maxTunnelsPerClient, request.clientTunnels >= tunnelLimit {
            let who = request.clientKey == .unknown ? "the unknown clients together hold" : "the client (\(request.clientKey)) holds"
            return refuse(.clientLimit, "\(who) \(request.clientTunnels) tunnel(s), and max_tunnels_per_client = \(tunnelLimit)")
        }
        guard case .transparent(let original, let hidesName) = request.route else {
            return .admit(entry: entry, client: client, addresses: nil)
        }
        let configured = request.host.serverName.flatMap { config.resolve[$0] }
        // The client chose the address as well as the name: unless the admission proves the
        // name, the address must be one the name resolves to.
        let authentication = NameAuthentication.of(entry.policy.settings, at: time)
        guard !authentication.isProven else {
            return .admit(entry: entry, client: client, addresses: configured ?? [original])
        }
        if hidesName, entry.policy.mode == .tunnel { return refuse(.destinationMismatch, echRefusal(host: request.host, entry: entry)) }
        let resolved: [IPAddress]
        switch request.host {
        case .ip(let address): resolved = [address]
        case .name(let name):
            guard let addresses = configured ?? resolution else { return .resolve(name, entry: entry, client: client) }
            resolved = addresses
        }
        guard resolved.contains(original) else {
            let listed = resolved.map(\.description).joined(separator: ", ")
            return refuse(.destinationMismatch, "the client went to \(original), which is not among the addresses \(request.host) resolves to for pinproxy (\(listed)): \(entry.name) \(authentication.why); nothing was relayed")
        }
        return .admit(entry: entry, client: client, addresses: [original])
    }

    /// Why a tunnel entry refuses a ClientHello that carries `encrypted_client_hello`: it hides
    /// the name it really wants behind the one the tunnel is for (both listeners: a CONNECT
    /// tunnel reads it after its 200).
    public static func echRefusal(host: TargetHost, entry: PolicyEntry) -> String {
        "the ClientHello carries encrypted_client_hello: the name it is for is hidden, so the tunnel cannot be bound to \(host) (\(entry.name) has mode = \"tunnel\"); nothing was relayed"
    }
}
