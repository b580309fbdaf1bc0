import FoundationEssentials
import PinproxyCore
import Logging
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import PinproxyService

/// What a complete CONNECT request asks for.
typealias RequestTarget = (host: TargetHost, port: UInt16)

/// Host, port and entry of a log line, as far as they are known.
typealias ConnectionSubject = (host: TargetHost, port: UInt16, entry: PolicyEntry?)

/// A verdict kept by reference (`ClientConnection.Upstream.judged`).
final class JudgedVerdict {
    let verdict: Verdict

    init(_ verdict: Verdict) {
        self.verdict = verdict
    }
}

/// What `[clients]` decided for a connection, kept by reference (`Destination.client`).
final class ClientDecisionBox: Sendable {
    let decision: ClientDecision

    init(_ decision: ClientDecision) {
        self.decision = decision
    }

    /// The one box of `ClientDecision.notApplied`.
    static let notApplied = ClientDecisionBox(.notApplied)
}

/// What the CONNECT (or a transparent client's ClientHello) asked for, the policy entry it
/// falls under, and what `[clients]` decided for its client.
struct Destination: CustomStringConvertible {
    let host: TargetHost
    let port: UInt16
    let entry: PolicyEntry
    /// What the verdict reads besides `entry`, from the same config generation.
    let context: VerdictContext
    var client: ClientDecision { clientBox.decision }
    /// `client`, by reference (one shared box when `[clients]` decided nothing): every state
    /// and open tunnel that holds the destination holds a pointer, not the decision's storage.
    private let clientBox: ClientDecisionBox

    init(host: TargetHost, port: UInt16, entry: PolicyEntry, context: VerdictContext, client: ClientDecision) {
        self.host = host
        self.port = port
        self.entry = entry
        self.context = context
        clientBox = client == .notApplied ? .notApplied : ClientDecisionBox(client)
    }

    var description: String { "\(host):\(port)" }

    /// What a log line says it is about.
    var subject: ConnectionSubject { (host, port, entry) }
}

/// One client connection through its whole life: parse CONNECT → identify the client (with
/// `[clients]`) → look up policy → resolve →
/// connect → upstream TLS → evaluate → respond → intercept (read the ClientHello; when the
/// client does not offer what the upstream negotiated, reopen the upstream with the client's
/// offer: connect → upstream TLS → evaluate again) → hand over to the relay → relay; for a
/// `mode = "tunnel"` entry, connect → 200 → its ClientHello → bytes as they are (`PassThrough`).
/// Each step lives in the file named after it; all of them run on the connection's worker loop.
/// A connection on the transparent listener starts otherwise: read its ClientHello
/// (`TransparentHello.swift`) → the host from its SNI and the address from its original
/// destination (`OriginalDestination.swift`) → connect, offering the client's own ALPN list →
/// … → intercept without a 200 → relay.
///
/// The connection is a state machine. Each `State` holds what its step works with (the
/// destination once known, the pending lookup or connect, the upstream, the verdict) and the
/// step's timer, so no step can run without its data or wait without a deadline: leaving a
/// state drops its timer. Every transition goes through `enter`, and every event switches on
/// the state; an event in a state where it cannot happen closes the connection with a log line
/// (`unexpected`), never silently. All its I/O goes through `IO` (`ConnectionIO`): the daemon's
/// `LoopIO`, or the unit tests' embedded one.
final class ClientConnection<IO: ConnectionIO> {
    typealias Subject = ConnectionSubject

    /// Where the connection is in its life, with what that step needs. The states whose data
    /// is large and short-lived (a destination, an admission request, an upstream being
    /// opened) are `indirect`: their data lives in a box of its own while the state lasts, so
    /// the connection object is only as large as the states that last (an open tunnel's).
    enum State {
        /// Reading the CONNECT request, within `request_timeout`.
        case readingRequest(RequestHead, timer: IO.Timer)
        /// Transparent listener: reading the client's ClientHello (kept buffered), within
        /// `request_timeout`; the addresses say where the client was going.
        indirect case readingTransparentHello(ConnectionAddresses, IO.HelloReader, timer: IO.Timer)
        /// With `[clients]`: the owner of the client's socket is known, and what can block
        /// (its user's name, unit, program) is looked up off the loop, within
        /// `client_identity_timeout`; the request waits with it.
        indirect case identifying(ClientRequest, PendingIdentity, timer: IO.Timer)
        /// Waiting for DNS, within `dns_timeout`.
        indirect case resolving(Destination, IO.Lookup, timer: IO.Timer)
        /// Transparent listener, `mode = "tunnel"`: waiting for DNS, within `dns_timeout`, to
        /// learn whether the client's original destination is an address of the name it sent:
        /// the admission decision is taken again with the answer (`Admit.swift`); its
        /// ClientHello waits in the buffer.
        indirect case bindingTunnel(Destination, AdmissionRequest, ClientHello, IO.Lookup, timer: IO.Timer)
        /// Opening the upstream of a CONNECT, offering `ALPNOffer.upstreamDefault`: a refusal
        /// is the CONNECT's answer.
        indirect case opening(Destination, Dialing)
        /// Opening the only upstream of a transparent client, offering what its ClientHello
        /// (waiting in the client's buffer) offers: a refusal is a page inside the client's TLS.
        indirect case openingTransparent(Destination, ClientHello, Dialing)
        /// The verdict allowed the upstream and the 200 is sent: reading the client's
        /// ClientHello (kept buffered) to learn its ALPN offer, within the client's
        /// `handshake_timeout`, which runs on into `clientHandshake`.
        case readingClientHello(Tunnel, IO.HelloReader, timer: IO.Timer)
        /// The client does not offer what the upstream negotiated: the first upstream is
        /// closed and another opened at its address with the client's offer (`NegotiateProtocol.swift`).
        /// A refusal can only cut the client's handshake off.
        indirect case reopening(Destination, Reopen, Dialing)
        /// The client's TLS handshake, within `handshake_timeout`.
        case clientHandshake(Tunnel, timer: IO.Timer)
        /// The client's handshake is done: the relay takes both TLS connections over on the
        /// loop's next pass (`handOver`), outside the buffer events' callbacks.
        case handingOver(Tunnel, handOver: IO.Timer)
        /// Bytes both ways, moved by the relay; the timer checks `idle_timeout`.
        case relaying(Tunnel, IO.Relay, idleCheck: IO.Timer)
        /// A refusal is being sent; the connection closes once it is (at most `refusalGrace`).
        case refusing(grace: IO.Timer)
        /// `refusal = "in-tls"`: the refusal page inside the client's TLS. `InTLSRefusal` drives
        /// `clientSide` (with its own timeout) and ends the connection once; nil while it starts.
        indirect case refusingInTLS(Subject, RefusalReason, InTLSRefusal<IO>?)
        /// `mode = "tunnel"`: the upstream is connected and the 200 sent; reading the client's
        /// ClientHello (kept buffered) within `handshake_timeout`, before a byte goes upstream.
        case readingTunnelHello(PassThrough<IO.Endpoint>, IO.HelloReader, timer: IO.Timer)
        /// `mode = "tunnel"`: the client's bytes relayed as they are (`ByteRelay`); the timer
        /// checks `idle_timeout`.
        case passingThrough(PassThrough<IO.Endpoint>, ByteRelay<IO.Endpoint>, idleCheck: IO.Timer)
        case closed

        /// For log lines about events in the wrong state.
        var name: String {
            switch self {
            case .readingRequest: "reading-request"
            case .readingTransparentHello: "reading-transparent-hello"
            case .identifying: "identifying"
            case .resolving: "resolving"
            case .bindingTunnel: "binding-tunnel"
            case .opening(_, let step): step.name
            case .openingTransparent(_, _, let step): "transparent-" + step.name
            case .readingClientHello: "reading-client-hello"
            case .reopening(_, _, let step): "reopen-" + step.name
            case .clientHandshake: "client-handshake"
            case .handingOver: "handing-over"
            case .relaying: "relaying"
            case .refusing: "refusing"
            case .refusingInTLS: "refusing-in-tls"
            case .readingTunnelHello: "reading-tunnel-hello"
            case .passingThrough: "passing-through"
            case .closed: "closed"
            }
        }

        /// Stops the work this state waits for outside the connection (a DNS lookup, a
        /// connect). Its timer goes with the state; buffer events are closed by `close`.
        func abandonWaits() {
            switch self {
            case .resolving(_, let request, _), .bindingTunnel(_, _, _, let request, _): request.cancel()
            case .opening(_, .connecting(let attempt)), .openingTransparent(_, _, .connecting(let attempt)), .reopening(_, _, .connecting(let attempt)):
                attempt.connector.cancel()
            case .readingRequest, .readingTransparentHello, .identifying, .opening, .openingTransparent, .readingClientHello, .reopening,
                 .clientHandshake, .handingOver, .relaying, .refusing, .refusingInTLS, .readingTunnelHello, .passingThrough, .closed: break
            }
        }
    }

    /// The three steps of opening an upstream, the first or a reopened one.
    enum Dialing {
        /// Connecting to the checked addresses in turn, all within `connect_timeout`.
        case connecting(ConnectAttempt)
        /// The upstream TLS handshake, within `handshake_timeout`.
        case handshaking(Upstream, timer: IO.Timer)
        /// The built-in checks passed; the entry's `verify_command` runs off the loop
        /// (`CustomChecks`), within `verify_command_timeout` plus `handshake_timeout` for a slot.
        case checkingCommand(Upstream, Verdict, timer: IO.Timer)

        var name: String {
            switch self {
            case .connecting: "connecting"
            case .handshaking: "upstream-handshake"
            case .checkingCommand: "checking-command"
            }
        }

        /// The upstream connection once the connect is done.
        var upstream: Upstream? {
            switch self {
            case .connecting: nil
            case .handshaking(let upstream, _), .checkingCommand(let upstream, _, _): upstream
            }
        }
    }

    /// Why an upstream is reopened: the ClientHello (waiting in the client's buffer) whose
    /// offer the new one gets, and what the first upstream was admitted as.
    struct Reopen {
        let hello: ClientHello
        /// The first upstream's outcome, which the 200 told.
        let first: Verdict.Outcome
    }

    /// The request head read so far.
    struct RequestHead {
        var target: RequestTarget?
        var headerBytes = 0
        var headerLines = 0
    }

    /// The addresses being tried one after another, the attempt under way, and what failed.
    struct ConnectAttempt {
        let addresses: [SocketAddress]
        var index: Int
        var connector: IO.Dial
        var failures: [String]
        var timedOut: Bool
        /// When `connect_timeout` runs out for all the addresses together (loop time).
        let deadline: TimeInterval
        let timer: IO.Timer
    }

    /// An upstream TLS connection, the address it goes to, and the ALPN offer it was made.
    struct Upstream {
        let connection: IO.Endpoint
        let address: SocketAddress
        let offer: ALPNOffer
        /// When the connect was done (`ConnectionIO.now`).
        let started: TimeInterval
        /// Its socket's entry among the daemon's own (while a transparent listener is on).
        let own: OwnUpstreams.Registration?
        /// The verdict on the server, once judged (`judge`): during the handshake when the server
        /// asked for the entry's client certificate. The connection goes on with this one.
        var judged: Verdict? {
            get { judgedBox?.verdict }
            set { judgedBox = newValue.map(JudgedVerdict.init) }
        }
        /// `judged`, by reference: an upstream (and the tunnel that keeps it) holds one pointer,
        /// not a verdict's worth of storage, when no verdict was taken in the handshake.
        private var judgedBox: JudgedVerdict? = nil

        init(connection: IO.Endpoint, address: SocketAddress, offer: ALPNOffer, started: TimeInterval, own: OwnUpstreams.Registration?) {
            self.connection = connection
            self.address = address
            self.offer = offer
            self.started = started
            self.own = own
        }

        /// Whether the server asked for the entry's client certificate and did not get it,
        /// having failed the verdict (report-only failures included).
        var withheldClientCertificate: Bool {
            judged.map { !$0.releasesClientCertificate } ?? false
        }
    }

    /// An upstream the verdict admitted, the protocol it negotiated, and the relay's counters
    /// (a class: they change on every read). It keeps the verdict's outcome, not the verdict:
    /// its checks and certificates are recorded once, and an idle tunnel holds none of them.
    final class Tunnel {
        let destination: Destination
        let upstream: Upstream
        /// What the verdict admitted it as (a reopened upstream's verdict is compared with it).
        let outcome: Verdict.Outcome
        /// What the upstream negotiated, which is what the client gets.
        let applicationProtocol: ALPNProtocol?
        /// When the relay started (`ConnectionIO.now`).
        var relayStarted: TimeInterval = 0
        // Changed on every relay pass, by the connection's own callbacks on its loop, never in
        // overlapping accesses: no run-time exclusivity checks on the hot path.
        @exclusivity(unchecked) var lastActivity: TimeInterval = 0
        @exclusivity(unchecked) var bytesUp = 0
        @exclusivity(unchecked) var bytesDown = 0
        /// Directions whose source has stopped sending (and whose sink has been told so).
        var ended: Set<Direction> = []
        var closeReason = ""

        init(destination: Destination, upstream: Upstream, outcome: Verdict.Outcome) {
            self.destination = destination
            self.upstream = upstream
            self.outcome = outcome
            self.applicationProtocol = upstream.connection.selectedProtocol
        }
    }

    let io: IO
    let client: SocketAddress?
    /// The listener the client arrived on.
    let listener: ListenerKind
    /// Where the client's socket is connected to on the CONNECT listener (this end of the
    /// connection); read only when the config has `[clients]`.
    let ourEnd: SocketAddress?
    /// The config snapshot taken at accept, by reference; a reload never changes it.
    let snapshot: ConfigSnapshot
    /// The snapshot's config, borrowed (never copied).
    var config: Config {
        _read { yield snapshot.config }
    }
    /// The client's socket: plain until the client's TLS is accepted, then the TLS filter on
    /// top of it, until the relay takes the connection over.
    var clientSide: IO.Endpoint
    /// Called once, when the connection has closed.
    private let onClose: (ClientConnection) -> Void
    /// `.closed` until `start`.
    private(set) var state: State = .closed
    /// Who the admission counted this connection's tunnel for (`ClientTunnels`).
    var countedAs: ClientKey?

    /// Bytes a client may send after its request and before its tunnel opens (a pipelined
    /// TLS ClientHello); more is refused, so the buffer stays bounded while the client is watched.
    static var maxEarlyBytes: Int { 32 * 1024 }
    /// How long a refusal may take to reach the client.
    static var refusalGrace: TimeInterval { 5 }

    /// A connection on `clientSide`, the accepted client's socket.
    init(io: IO, clientSide: IO.Endpoint, client: SocketAddress?, ourEnd: SocketAddress?, config: ConfigSnapshot,
         listener: ListenerKind, onClose: @escaping (ClientConnection) -> Void) {
        self.io = io
        self.clientSide = clientSide
        self.client = client
        self.ourEnd = ourEnd
        snapshot = config
        self.listener = listener
        self.onClose = onClose
    }

    /// Parse CONNECT (after accept): read the request within `request_timeout`. The client is watched
    /// from here until its tunnel opens: if it leaves, whatever is under way upstream stops.
    func start() {
        watchClient()
        let timer = io.timer(after: config.proxy.requestTimeout, repeats: false) { [weak self] in self?.requestTimedOut() }
        enter(.readingRequest(RequestHead(), timer: timer))
        clientSide.setReading(true)
    }

    /// Routes the plain client socket's events to this connection.
    func watchClient() {
        clientSide.onRead = { [weak self] in self?.clientReadable() }
        clientSide.onWrite = { [weak self] in self?.clientWritable() }
        clientSide.onEvent = { [weak self] events in self?.clientEvent(events) }
    }

    /// Moves to `next`, abandoning what the current state waited for.
    func enter(_ next: State) {
        let previous = state
        state = next
        previous.abandonWaits()
    }

    /// Keeps the state with new data (the request head read so far, the next address to
    /// try): nothing is abandoned.
    func update(_ same: State) {
        state = same
    }

    /// Moves the upstream being opened, first or reopened, on to its next step.
    func advance(_ step: Dialing) {
        switch state {
        case .opening(let destination, _): enter(.opening(destination, step))
        case .openingTransparent(let destination, let hello, _): enter(.openingTransparent(destination, hello, step))
        case .reopening(let destination, let reopen, _): enter(.reopening(destination, reopen, step))
        case .readingRequest, .readingTransparentHello, .identifying, .resolving, .bindingTunnel, .readingClientHello, .clientHandshake,
             .handingOver, .relaying, .refusing, .refusingInTLS, .readingTunnelHello, .passingThrough, .closed:
            unexpected("an upstream's \(step.name)")
        }
    }

    /// The destination and the step of the upstream being opened, first or reopened.
    var dialing: (Destination, Dialing)? {
        switch state {
        case .opening(let destination, let step), .openingTransparent(let destination, _, let step), .reopening(let destination, _, let step):
            (destination, step)
        case .readingRequest, .readingTransparentHello, .identifying, .resolving, .bindingTunnel, .readingClientHello, .clientHandshake,
             .handingOver, .relaying, .refusing, .refusingInTLS, .readingTunnelHello, .passingThrough, .closed: nil
        }
    }

    // MARK: Events on the plain client socket (before the client's TLS replaces it)

    private func clientReadable() {
        switch state {
        case .readingRequest:
            readRequest()
        case .readingTransparentHello:
            continueTransparentHello()
        case .identifying, .resolving, .opening:
            // Reading goes on so that a client that leaves is noticed; what it sends early is
            // kept for its TLS handshake, within a bound.
            if clientSide.inputLength > Self.maxEarlyBytes {
                refuse(.badRequest, "the client sent more than \(Self.maxEarlyBytes / 1024) KiB before its tunnel was open")
            }
        case .readingClientHello:
            continueClientHello()
        case .readingTunnelHello:
            continueTunnelHello()
        case .openingTransparent, .bindingTunnel, .reopening:
            // The ClientHello waits in the buffer for the real handshake; more than a
            // ClientHello and some early bytes is not a client waiting for its ServerHello.
            if clientSide.inputLength > ClientHelloReader.maximumBytes + Self.maxEarlyBytes {
                let why = "the client sent more than \((ClientHelloReader.maximumBytes + Self.maxEarlyBytes) / 1024) KiB before its handshake was answered"
                if listener == .transparent { return refuse(.badRequest, why) }
                clientHandshakeFailed(why)
            }
        case .refusing:
            clientSide.discardInput()
        case .clientHandshake, .handingOver, .relaying, .refusingInTLS, .passingThrough, .closed:
            unexpected("a read on the plain client socket")
        }
    }

    private func clientWritable() {
        switch state {
        case .refusing:
            if clientSide.outputLength == 0 { close() }
        case .readingClientHello, .reopening, .readingTunnelHello:
            break  // the 200 has gone out
        case .readingRequest, .readingTransparentHello, .identifying, .resolving, .bindingTunnel, .opening, .openingTransparent,
             .clientHandshake, .handingOver, .relaying, .refusingInTLS, .passingThrough, .closed:
            unexpected("a write completion on the plain client socket")
        }
    }

    private func clientEvent(_ events: EndpointEvents) {
        switch state {
        case .readingRequest, .readingTransparentHello, .refusing:
            // Gone before its request (or ClientHello) was complete, or after its refusal: nothing to abandon.
            close()
        case .identifying, .resolving, .opening, .openingTransparent, .readingTunnelHello, .bindingTunnel:
            clientLeft(events)
        case .readingClientHello:
            clientHandshakeFailed("the client closed the connection before its ClientHello was complete")
        case .reopening:
            clientHandshakeFailed("the client closed the connection while the upstream was reopened for its ALPN offer: the reopened upstream is abandoned")
        case .clientHandshake, .handingOver, .relaying, .refusingInTLS, .passingThrough, .closed:
            unexpected("an event (\(events.rawValue)) on the plain client socket")
        }
    }

    private func requestTimedOut() {
        guard case .readingRequest = state else { return unexpected("the request timer") }
        logEvent(.warning, "request-timeout", detail: "no complete CONNECT request within \(formatSeconds(config.proxy.requestTimeout)): closed")
        close()
    }

    /// The client closed (or reset) its connection before its tunnel opened: the upstream work
    /// stops at once, both descriptors are freed, and the decision line says so (once).
    private func clientLeft(_ events: EndpointEvents) {
        let how = events.contains(.error) ? "reset" : "closed"
        let abandoned: String
        switch state {
        case .identifying(let request, _, _):
            abandoned = "while it was being identified for \(request.host):\(request.port)"
        case .resolving(let destination, _, _):
            abandoned = "while \(destination.host) was being resolved: the DNS lookup is cancelled"
        case .opening(let destination, .connecting(let attempt)), .openingTransparent(let destination, _, .connecting(let attempt)):
            abandoned = "while connecting to \(destination) (\(attempt.addresses[attempt.index])): the connect is abandoned"
        case .opening(let destination, .handshaking(let upstream, _)), .openingTransparent(let destination, _, .handshaking(let upstream, _)):
            abandoned = "during the TLS handshake with \(destination) (\(upstream.address)): the upstream is closed"
        case .opening(let destination, .checkingCommand(let upstream, _, _)), .openingTransparent(let destination, _, .checkingCommand(let upstream, _, _)):
            abandoned = "while the verify_command for \(destination) (\(upstream.address)) ran: the upstream is closed"
        case .readingTunnelHello(let passage, _, _):
            abandoned = "before its ClientHello for the tunnel to \(passage.destination) (\(passage.address)) came: nothing was relayed"
        case .bindingTunnel(let destination, _, _, _, _):
            abandoned = "while \(destination.host) was being resolved to bind its tunnel: the DNS lookup is cancelled"
        case .readingRequest, .readingTransparentHello, .readingClientHello, .reopening, .clientHandshake, .handingOver,
             .relaying, .refusing, .refusingInTLS, .passingThrough, .closed:
            return unexpected("the client leaving")
        }
        record(.init(outcome: .clientGone, reason: nil, status: nil, detail: "the client \(how) its connection \(abandoned)"))
        close()
    }

    /// After the 200, the client's handshake cannot go on: logged, and the connection closed.
    func clientHandshakeFailed(_ why: String) {
        logEvent(.warning, "client-handshake-failed", detail: why)
        close()
    }

    /// An event that cannot happen in the current state: logged, and the connection closed.
    func unexpected(_ event: String) {
        logEvent(.error, "internal-error", detail: "\(event) in state \(state.name): connection closed")
        close()
    }

    // MARK: Closing

    /// The daemon is stopping: the connection is closed whatever its state; an open tunnel's
    /// closing line says `reason`.
    func cut(_ reason: String) {
        if case .relaying(let tunnel, _, _) = state { tunnel.closeReason = reason }
        if case .passingThrough(let passage, _, _) = state { passage.closeReason = reason }
        // Nothing lingers: the loop stops right after.
        clientSide.abort()
        close()
    }

    /// Closes both sides, logs the tunnel if one was open, and leaves the worker.
    func close() {
        let previous = state
        if case .closed = previous { return }
        state = .closed
        previous.abandonWaits()
        clientSide.close()
        if let countedAs { io.clientTunnels.release(countedAs) }
        switch previous {
        case .opening(_, let step), .openingTransparent(_, _, let step), .reopening(_, _, let step):
            step.upstream?.connection.close()
        case .readingClientHello(let tunnel, _, _), .clientHandshake(let tunnel, _), .handingOver(let tunnel, _):
            tunnel.upstream.connection.close()
        case .relaying(let tunnel, let relay, _):
            relay.close()
            recordTunnelClosed(tunnel.destination, upstream: tunnel.upstream.address,
                               .init(alpn: tunnel.applicationProtocol, bytesUp: tunnel.bytesUp, bytesDown: tunnel.bytesDown,
                                     duration: io.now - tunnel.relayStarted, why: tunnel.closeReason))
        case .readingTunnelHello(let passage, _, _):
            passage.upstream.close()
        case .passingThrough(let passage, let relay, _):
            relay.close()
            recordTunnelClosed(passage.destination, upstream: passage.address,
                               .init(alpn: nil, bytesUp: passage.bytesUp, bytesDown: passage.bytesDown,
                                     duration: io.now - passage.relayStarted, why: passage.closeReason))
        case .refusingInTLS(_, _, let responder):
            responder?.stop()
        case .readingRequest, .readingTransparentHello, .identifying, .resolving, .bindingTunnel, .refusing, .closed:
            break
        }
        onClose(self)
    }

    // MARK: Log lines

    /// Host, port and entry, as far as the current state knows them.
    var logSubject: Subject? {
        switch state {
        case .readingRequest(let head, _):
            return head.target.map { ($0.host, $0.port, nil) }
        case .readingTransparentHello(let addresses, _, _):
            guard case .success(let original) = addresses.original else { return nil }
            return (.ip(original.address), original.port, nil)
        case .identifying(let request, _, _):
            return (request.host, request.port, nil)
        case .resolving(let destination, _, _), .bindingTunnel(let destination, _, _, _, _), .opening(let destination, _),
             .openingTransparent(let destination, _, _), .reopening(let destination, _, _):
            return (destination.host, destination.port, destination.entry)
        case .readingClientHello(let tunnel, _, _), .clientHandshake(let tunnel, _), .handingOver(let tunnel, _), .relaying(let tunnel, _, _):
            return (tunnel.destination.host, tunnel.destination.port, tunnel.destination.entry)
        case .refusingInTLS(let subject, _, _):
            return subject
        case .readingTunnelHello(let passage, _, _), .passingThrough(let passage, _, _):
            return (passage.destination.host, passage.destination.port, passage.destination.entry)
        case .refusing, .closed:
            return nil
        }
    }

    /// What `[clients]` decided, once the state has a destination.
    var clientDecision: ClientDecision? {
        switch state {
        case .resolving(let destination, _, _), .bindingTunnel(let destination, _, _, _, _), .opening(let destination, _),
             .openingTransparent(let destination, _, _), .reopening(let destination, _, _):
            return destination.client
        case .readingClientHello(let tunnel, _, _), .clientHandshake(let tunnel, _), .handingOver(let tunnel, _), .relaying(let tunnel, _, _):
            return tunnel.destination.client
        case .readingTunnelHello(let passage, _, _), .passingThrough(let passage, _, _):
            return passage.destination.client
        case .readingRequest, .readingTransparentHello, .identifying, .refusing, .refusingInTLS, .closed:
            return nil
        }
    }

    /// The upstream's address, once connected.
    var upstreamAddress: SocketAddress? {
        switch state {
        case .opening(_, let step), .openingTransparent(_, _, let step), .reopening(_, _, let step):
            return step.upstream?.address
        case .readingClientHello(let tunnel, _, _), .clientHandshake(let tunnel, _), .handingOver(let tunnel, _), .relaying(let tunnel, _, _):
            return tunnel.upstream.address
        case .readingTunnelHello(let passage, _, _), .passingThrough(let passage, _, _):
            return passage.address
        case .readingRequest, .readingTransparentHello, .identifying, .resolving, .bindingTunnel, .refusing, .refusingInTLS, .closed:
            return nil
        }
    }

    /// Records this connection's decision (`ConnectionRecord`): about `subject` and for
    /// `client` where the state does not hold them yet.
    func record(_ decision: ConnectionRecord.Decision, subject: Subject? = nil, client decided: ClientDecision? = nil) {
        io.record(ConnectionRecord(listener: listener, client: client, clientDecision: decided ?? clientDecision, subject: subject ?? logSubject,
                                   upstream: upstreamAddress, event: .decision(decision), reportsClientIdentity: config.proxy.reportClientIdentity))
    }

    /// Records the end of the tunnel to `destination`.
    private func recordTunnelClosed(_ destination: Destination, upstream: SocketAddress, _ end: ConnectionRecord.TunnelEnd) {
        io.record(ConnectionRecord(listener: listener, client: client, clientDecision: destination.client, subject: destination.subject,
                                   upstream: upstream, event: .tunnelClosed(end), reportsClientIdentity: false))
    }

    /// A line about this connection that is not its decision.
    func logEvent(_ level: Logger.Level, _ event: String, detail: String) {
        var fields: [(AccessLog.Field, String)] = [(.client, client?.description ?? "-")]
        if case .forwarded = clientDecision?.identity { fields += ConnectionRecord.identityFields(clientDecision) }
        if let subject = logSubject { fields += [(.host, subject.host.description), (.port, String(subject.port))] }
        fields.append((.detail, detail))
        io.log(level, event, fields)
    }
}

/// `10s` or `0.5s`.
func formatSeconds(_ seconds: TimeInterval) -> String {
    seconds.secondsText + "s"
}
