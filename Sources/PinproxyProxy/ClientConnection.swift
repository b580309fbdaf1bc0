import Foundation
import Logging
import PinproxyInterop
import PinproxyPolicy
import PinproxyService

typealias LoopTimer = PinproxyInterop.Timer

/// One client connection through its whole life: parse CONNECT → identify the client (with
/// `[clients]`) → look up policy → resolve →
/// connect → upstream TLS → evaluate → respond → intercept (read the ClientHello; when the
/// client does not offer what the upstream negotiated, reopen the upstream with the client's
/// offer: connect → upstream TLS → evaluate again) → relay; for a `mode = "tunnel"` entry,
/// connect → 200 → its ClientHello → bytes as they are (`PassThrough`). Each step lives in the
/// file named after it; all of them run on the connection's worker loop. A connection on the
/// transparent listener starts otherwise: read its ClientHello (`TransparentHello.swift`) → the
/// host from its SNI and the address from its original destination (`OriginalDestination.swift`)
/// → connect, offering the client's own ALPN list → … → intercept without a 200 → relay.
///
/// The connection is a state machine. Each `State` holds what its step works with (the
/// destination once known, the pending lookup or connect, the upstream, the verdict) and the
/// step's timer, so no step can run without its data or wait without a deadline: leaving a
/// state drops its timer. Every event switches on the state; an event in a state where it
/// cannot happen closes the connection with a log line (`unexpected`), never silently.
final class ClientConnection {
    /// Where the connection is in its life, with what that step needs.
    enum State {
        /// Reading the CONNECT request, within `request_timeout`.
        case readingRequest(RequestHead, timer: LoopTimer)
        /// Transparent listener: reading the client's ClientHello (kept buffered), within
        /// `request_timeout`; the addresses say where the client was going.
        case readingTransparentHello(ConnectionAddresses, ClientHelloReader, timer: LoopTimer)
        /// With `[clients]`: the owner of the client's socket is known, and what can block
        /// (its user's name, unit, program) is looked up off the loop, within
        /// `client_identity_timeout`; the request waits with it.
        case identifying(ClientRequest, PendingIdentity, timer: LoopTimer)
        /// Waiting for DNS, within `dns_timeout`.
        case resolving(Destination, DNSRequest, timer: LoopTimer)
        /// Transparent listener, `mode = "tunnel"`: waiting for DNS, within `dns_timeout`, to
        /// learn whether the client's original destination is an address of the name it sent
        /// (`TunnelDestination.swift`); its ClientHello waits in the buffer.
        case bindingTunnel(Destination, original: SocketAddress, ClientHello, DNSRequest, timer: LoopTimer)
        /// Connecting to the checked addresses in turn, all within `connect_timeout`: for the
        /// first upstream, again for the client's ALPN offer, or for a transparent client (`opening`).
        case connecting(Destination, ConnectAttempt, Opening)
        /// The upstream TLS handshake, within `handshake_timeout`.
        case upstreamHandshake(Destination, Upstream, timer: LoopTimer, Opening)
        /// The built-in checks passed; the entry's `verify_command` runs off the loop
        /// (`CustomChecks`), within `verify_command_timeout` plus `handshake_timeout` for a slot.
        case checkingCommand(Destination, Upstream, Verdict, timer: LoopTimer, Opening)
        /// The verdict allowed the upstream and the 200 is sent: reading the client's
        /// ClientHello (kept buffered) to learn its ALPN offer. The timer is the client's
        /// `handshake_timeout`, which runs on into `clientHandshake`.
        case readingClientHello(Tunnel, ClientHelloReader, timer: LoopTimer)
        /// The client's TLS handshake, within `handshake_timeout`. Once it is done, the timer
        /// is the relay's start on the loop's next pass (`startRelay`).
        case clientHandshake(Tunnel, timer: LoopTimer)
        /// Bytes both ways, moved by the relay; the timer checks `idle_timeout`.
        case relaying(Tunnel, TLSRelay, idleCheck: LoopTimer)
        /// A refusal is being sent; the connection closes once it is (at most `refusalGrace`).
        case refusing(grace: LoopTimer)
        /// `refusal = "in-tls"`: the refusal page inside the client's TLS. `InTLSRefusal` drives
        /// `clientSide` (with its own timeout) and ends the connection once.
        case refusingInTLS(Subject, RefusalReason)
        /// `mode = "tunnel"`: the upstream is connected and the 200 sent; reading the client's
        /// ClientHello (kept buffered) within `handshake_timeout`, before a byte goes upstream.
        case readingTunnelHello(PassThrough, ClientHelloReader, timer: LoopTimer)
        /// `mode = "tunnel"`: the client's bytes relayed as they are (`ByteRelay`); the timer
        /// checks `idle_timeout`.
        case passingThrough(PassThrough, ByteRelay, idleCheck: LoopTimer)
        case closed

        /// For log lines about events in the wrong state.
        var name: String {
            switch self {
            case .readingRequest: "reading-request"
            case .readingTransparentHello: "reading-transparent-hello"
            case .identifying: "identifying"
            case .resolving: "resolving"
            case .bindingTunnel: "binding-tunnel"
            case .connecting(_, _, .first): "connecting"
            case .connecting(_, _, .reopen): "reopen-connecting"
            case .connecting(_, _, .transparent): "transparent-connecting"
            case .upstreamHandshake(_, _, _, .first): "upstream-handshake"
            case .upstreamHandshake(_, _, _, .reopen): "reopen-upstream-handshake"
            case .upstreamHandshake(_, _, _, .transparent): "transparent-upstream-handshake"
            case .checkingCommand(_, _, _, _, .first): "checking-command"
            case .checkingCommand(_, _, _, _, .reopen): "reopen-checking-command"
            case .checkingCommand(_, _, _, _, .transparent): "transparent-checking-command"
            case .readingClientHello: "reading-client-hello"
            case .clientHandshake: "client-handshake"
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
            case .connecting(_, let attempt, _): attempt.connector.cancel()
            case .readingRequest, .readingTransparentHello, .identifying, .upstreamHandshake, .checkingCommand, .readingClientHello, .clientHandshake,
                 .relaying, .refusing, .refusingInTLS, .readingTunnelHello, .passingThrough, .closed: break
            }
        }
    }

    /// The request head read so far.
    struct RequestHead {
        var target: (host: TargetHost, port: UInt16)?
        var headerBytes = 0
        var headerLines = 0
    }

    /// What a complete CONNECT request asks for.
    typealias RequestTarget = (host: TargetHost, port: UInt16)

    /// What the CONNECT asked for, the policy entry it falls under, and what `[clients]`
    /// decided for its client.
    struct Destination: CustomStringConvertible {
        let host: TargetHost
        let port: UInt16
        let entry: PolicyEntry
        /// What the verdict reads besides `entry`, from the same config generation.
        let context: VerdictContext
        let client: ClientDecision

        var description: String { "\(host):\(port)" }
    }

    /// Host, port and entry of a log line, as far as they are known.
    typealias Subject = (host: TargetHost, port: UInt16, entry: PolicyEntry?)

    /// Which upstream connection a connect or handshake opens.
    enum Opening {
        /// The first, offering `ALPNOffer.upstreamDefault`; a refusal is the CONNECT's answer.
        case first
        /// After the 200, at the first upstream's address again, offering what this
        /// ClientHello (waiting in the client's buffer) offers; a refusal can only cut the
        /// client's handshake off. `after` is the first upstream's outcome, which the 200 told.
        case reopen(for: ClientHello, after: Verdict.Outcome)
        /// The only upstream of a transparent client, offering what its ClientHello (waiting
        /// in the client's buffer) offers; a refusal is a page inside the client's TLS.
        case transparent(for: ClientHello)

        /// What the upstream is offered.
        var offer: ALPNOffer {
            switch self {
            case .first: ALPNOffer.upstreamDefault
            case .reopen(let hello, _), .transparent(let hello): ALPNAgreement.reopenOffer(for: hello.alpn)
            }
        }
    }

    /// The addresses being tried one after another, the attempt under way, and what failed.
    struct ConnectAttempt {
        let addresses: [SocketAddress]
        var index: Int
        var connector: TCPConnector
        var failures: [String]
        var timedOut: Bool
        /// When `connect_timeout` runs out for all the addresses together (loop time).
        let deadline: TimeInterval
        let timer: LoopTimer
    }

    /// An upstream TLS connection, the address it goes to, and the ALPN offer it was made.
    struct Upstream {
        let connection: BufferEvent
        let address: SocketAddress
        let offer: ALPNOffer
        let started: Date
        /// Its socket's entry among the daemon's own (while a transparent listener is on).
        let own: OwnUpstreams.Registration?
    }

    /// An upstream the verdict admitted, the protocol it negotiated, and the relay's counters
    /// (a class: they change on every read).
    final class Tunnel {
        let destination: Destination
        let upstream: Upstream
        let verdict: Verdict
        /// What the upstream negotiated, which is what the client gets.
        let applicationProtocol: ALPNProtocol?
        var relayStarted = Date()
        var lastActivity: TimeInterval = 0
        var bytesUp = 0
        var bytesDown = 0
        /// Directions whose source has stopped sending (and whose sink has been told so).
        var ended: Set<Direction> = []
        var closeReason = ""

        init(destination: Destination, upstream: Upstream, verdict: Verdict) {
            self.destination = destination
            self.upstream = upstream
            self.verdict = verdict
            self.applicationProtocol = upstream.connection.selectedProtocol
        }
    }

    let worker: Worker
    let client: SocketAddress?
    /// The listener the client arrived on.
    let listener: ListenerKind
    /// Where the client's socket is connected to on the CONNECT listener (this end of the
    /// connection); read only when the config has `[clients]`.
    let ourEnd: SocketAddress?
    /// The config snapshot taken at accept; a reload never changes it.
    let config: Config
    /// The client's socket: plain until the client's TLS is accepted, then the TLS filter on
    /// top of it, until the relay takes the connection over.
    var clientSide: BufferEvent
    /// `.closed` until `start`.
    var state: State = .closed

    /// Bytes a client may send after its request and before its tunnel opens (a pipelined
    /// TLS ClientHello); more is refused, so the buffer stays bounded while the client is watched.
    static let maxEarlyBytes = 32 * 1024
    /// How long a refusal may take to reach the client.
    static let refusalGrace: TimeInterval = 5

    /// Throws (the socket closed) when the client's buffer event cannot be made.
    init(worker: Worker, socket: Int32, client: SocketAddress?, config: Config, listener: ListenerKind) throws {
        self.worker = worker
        self.client = client
        self.listener = listener
        self.config = config
        ourEnd = config.clients.isEmpty || listener == .transparent ? nil : SocketAddress.local(of: socket)
        setNoDelay(socket)
        self.clientSide = try BufferEvent(loop: worker.loop, socket: socket)
    }

    /// Step 1 (after accept): read the request within `request_timeout`. The client is watched
    /// from here until its tunnel opens: if it leaves, whatever is under way upstream stops.
    func start() {
        watchClient()
        let timer = LoopTimer(loop: worker.loop, after: config.proxy.requestTimeout) { [weak self] in self?.requestTimedOut() }
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

    // MARK: Events on the plain client socket (before the client's TLS replaces it)

    private func clientReadable() {
        switch state {
        case .readingRequest:
            readRequest()
        case .readingTransparentHello:
            continueTransparentHello()
        case .identifying, .resolving, .connecting(_, _, .first), .upstreamHandshake(_, _, _, .first), .checkingCommand(_, _, _, _, .first):
            // Reading goes on so that a client that leaves is noticed; what it sends early is
            // kept for its TLS handshake, within a bound.
            if clientSide.inputLength > Self.maxEarlyBytes {
                refuse(.badRequest, "the client sent more than \(Self.maxEarlyBytes / 1024) KiB before its tunnel was open")
            }
        case .readingClientHello:
            continueClientHello()
        case .readingTunnelHello:
            continueTunnelHello()
        case .connecting(_, _, .reopen), .upstreamHandshake(_, _, _, .reopen), .checkingCommand(_, _, _, _, .reopen),
             .connecting(_, _, .transparent), .upstreamHandshake(_, _, _, .transparent), .checkingCommand(_, _, _, _, .transparent),
             .bindingTunnel:
            // The ClientHello waits in the buffer for the real handshake; more than a
            // ClientHello and some early bytes is not a client waiting for its ServerHello.
            if clientSide.inputLength > ClientHelloReader.maximumBytes + Self.maxEarlyBytes {
                let why = "the client sent more than \((ClientHelloReader.maximumBytes + Self.maxEarlyBytes) / 1024) KiB before its handshake was answered"
                if listener == .transparent { return refuse(.badRequest, why) }
                clientHandshakeFailed(why)
            }
        case .refusing:
            clientSide.discardInput()
        case .clientHandshake, .relaying, .refusingInTLS, .passingThrough, .closed:
            unexpected("a read on the plain client socket")
        }
    }

    private func clientWritable() {
        switch state {
        case .refusing:
            if clientSide.outputLength == 0 { close() }
        case .readingClientHello, .connecting(_, _, .reopen), .upstreamHandshake(_, _, _, .reopen),
             .checkingCommand(_, _, _, _, .reopen), .readingTunnelHello:
            break  // the 200 has gone out
        case .readingRequest, .readingTransparentHello, .identifying, .resolving, .bindingTunnel, .connecting(_, _, .first), .upstreamHandshake(_, _, _, .first),
             .checkingCommand(_, _, _, _, .first), .connecting(_, _, .transparent), .upstreamHandshake(_, _, _, .transparent),
             .checkingCommand(_, _, _, _, .transparent), .clientHandshake, .relaying, .refusingInTLS, .passingThrough, .closed:
            unexpected("a write completion on the plain client socket")
        }
    }

    private func clientEvent(_ events: BufferEvent.Events) {
        switch state {
        case .readingRequest, .readingTransparentHello, .refusing:
            // Gone before its request (or ClientHello) was complete, or after its refusal: nothing to abandon.
            close()
        case .identifying, .resolving, .connecting(_, _, .first), .upstreamHandshake(_, _, _, .first), .checkingCommand(_, _, _, _, .first),
             .connecting(_, _, .transparent), .upstreamHandshake(_, _, _, .transparent), .checkingCommand(_, _, _, _, .transparent),
             .readingTunnelHello, .bindingTunnel:
            clientLeft(events)
        case .readingClientHello:
            clientHandshakeFailed("the client closed the connection before its ClientHello was complete")
        case .connecting(_, _, .reopen), .upstreamHandshake(_, _, _, .reopen), .checkingCommand(_, _, _, _, .reopen):
            clientHandshakeFailed("the client closed the connection while the upstream was reopened for its ALPN offer: the reopened upstream is abandoned")
        case .clientHandshake, .relaying, .refusingInTLS, .passingThrough, .closed:
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
    private func clientLeft(_ events: BufferEvent.Events) {
        let how = events.contains(.error) ? "reset" : "closed"
        let abandoned: String
        switch state {
        case .identifying(let request, _, _):
            abandoned = "while it was being identified for \(request.host):\(request.port)"
        case .resolving(let destination, _, _):
            abandoned = "while \(destination.host) was being resolved: the DNS lookup is cancelled"
        case .connecting(let destination, let attempt, .first), .connecting(let destination, let attempt, .transparent):
            abandoned = "while connecting to \(destination) (\(attempt.addresses[attempt.index])): the connect is abandoned"
        case .upstreamHandshake(let destination, let upstream, _, .first), .upstreamHandshake(let destination, let upstream, _, .transparent):
            abandoned = "during the TLS handshake with \(destination) (\(upstream.address)): the upstream is closed"
        case .checkingCommand(let destination, let upstream, _, _, .first), .checkingCommand(let destination, let upstream, _, _, .transparent):
            abandoned = "while the verify_command for \(destination) (\(upstream.address)) ran: the upstream is closed"
        case .readingTunnelHello(let passage, _, _):
            abandoned = "before its ClientHello for the tunnel to \(passage.destination) (\(passage.address)) came: nothing was relayed"
        case .bindingTunnel(let destination, _, _, _, _):
            abandoned = "while \(destination.host) was being resolved to bind its tunnel: the DNS lookup is cancelled"
        case .readingRequest, .readingTransparentHello, .connecting, .upstreamHandshake, .checkingCommand, .readingClientHello, .clientHandshake,
             .relaying, .refusing, .refusingInTLS, .passingThrough, .closed:
            return unexpected("the client leaving")
        }
        logDecision(outcome: .clientGone, reason: nil, status: nil, detail: "the client \(how) its connection \(abandoned)", verdict: nil)
        worker.shared.metrics.connection(outcome: .clientGone, reason: nil, listener: listener,
                                         client: clientDecision?.metricLabel ?? ProxyMetrics.noClientLabel)
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
        switch previous {
        case .upstreamHandshake(_, let upstream, _, _), .checkingCommand(_, let upstream, _, _, _):
            upstream.connection.close()
        case .readingClientHello(let tunnel, _, _), .clientHandshake(let tunnel, _):
            tunnel.upstream.connection.close()
        case .relaying(let tunnel, let relay, _):
            relay.close()
            let destination = tunnel.destination
            worker.shared.tunnelClosed()
            worker.shared.log.emit(.info, "tunnel-closed", [(.client, client?.description ?? "-")] + Self.identityFields(destination.client.identity) + [
                (.listener, listener.rawValue), (.host, destination.host.description),
                (.port, String(destination.port)), (.entry, destination.entry.name), (.alpn, tunnel.applicationProtocol?.description ?? "-"),
                (.bytesUp, String(tunnel.bytesUp)), (.bytesDown, String(tunnel.bytesDown)),
                (.duration, String(format: "%.3f", Date().timeIntervalSince(tunnel.relayStarted))), (.detail, tunnel.closeReason),
            ])
        case .readingTunnelHello(let passage, _, _):
            passage.upstream.close()
        case .passingThrough(let passage, let relay, _):
            relay.close()
            let destination = passage.destination
            worker.shared.tunnelClosed()
            worker.shared.log.emit(.info, "tunnel-closed", [
                (.client, client?.description ?? "-"), (.listener, listener.rawValue), (.host, destination.host.description),
                (.port, String(destination.port)), (.entry, destination.entry.name), (.alpn, "-"), (.bytesUp, String(passage.bytesUp)), (.bytesDown, String(passage.bytesDown)),
                (.duration, String(format: "%.3f", Date().timeIntervalSince(passage.relayStarted))), (.detail, passage.closeReason),
            ])
        case .readingRequest, .readingTransparentHello, .identifying, .resolving, .bindingTunnel, .connecting, .refusing, .refusingInTLS, .closed:
            break
        }
        worker.remove(self)
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
        case .resolving(let destination, _, _), .bindingTunnel(let destination, _, _, _, _), .connecting(let destination, _, _),
             .upstreamHandshake(let destination, _, _, _),
             .checkingCommand(let destination, _, _, _, _):
            return (destination.host, destination.port, destination.entry)
        case .readingClientHello(let tunnel, _, _), .clientHandshake(let tunnel, _), .relaying(let tunnel, _, _):
            return (tunnel.destination.host, tunnel.destination.port, tunnel.destination.entry)
        case .refusingInTLS(let subject, _):
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
        case .resolving(let destination, _, _), .bindingTunnel(let destination, _, _, _, _), .connecting(let destination, _, _),
             .upstreamHandshake(let destination, _, _, _), .checkingCommand(let destination, _, _, _, _):
            return destination.client
        case .readingClientHello(let tunnel, _, _), .clientHandshake(let tunnel, _), .relaying(let tunnel, _, _):
            return tunnel.destination.client
        case .readingTunnelHello(let passage, _, _), .passingThrough(let passage, _, _):
            return passage.destination.client
        case .readingRequest, .readingTransparentHello, .identifying, .refusing, .refusingInTLS, .closed:
            return nil
        }
    }

    /// `client_uid`, `client_user`, `client_unit` and `client_exe`, as far as they are known.
    static func identityFields(_ identity: ClientIdentity?) -> [(AccessLog.Field, String)] {
        guard case .local(let client) = identity else { return [] }
        var fields: [(AccessLog.Field, String)] = [(.clientUID, String(client.uid))]
        if let user = client.user { fields.append((.clientUser, user)) }
        if let unit = client.unit { fields.append((.clientUnit, unit)) }
        if let exe = client.exe { fields.append((.clientExe, exe)) }
        return fields
    }

    /// A line about this connection that is not its decision.
    func logEvent(_ level: Logger.Level, _ event: String, detail: String) {
        var fields: [(AccessLog.Field, String)] = [(.client, client?.description ?? "-")]
        if let subject = logSubject { fields += [(.host, subject.host.description), (.port, String(subject.port))] }
        fields.append((.detail, detail))
        worker.shared.log.emit(level, event, fields)
    }
}

/// `10s` or `0.5s`.
func formatSeconds(_ seconds: TimeInterval) -> String {
    seconds == seconds.rounded() ? "\(Int(seconds))s" : "\(seconds)s"
}
