import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import PinproxyService
import Logging

/// A `mode = "tunnel"` connection once its upstream is connected: the plain upstream socket,
/// where it goes, and the relay's counters.
final class PassThrough<Endpoint: ConnectionEndpoint> {
    let destination: Destination
    let upstream: Endpoint
    let address: SocketAddress
    /// Its socket's entry among the daemon's own (while a transparent listener is on).
    let own: OwnUpstreams.Registration?
    /// When the relay started (`ConnectionIO.now`).
    var relayStarted: TimeInterval = 0
    var lastActivity: TimeInterval = 0
    var bytesUp = 0
    var bytesDown = 0
    var closeReason = ""

    init(destination: Destination, upstream: Endpoint, address: SocketAddress, own: OwnUpstreams.Registration?) {
        self.destination = destination
        self.upstream = upstream
        self.address = address
        self.own = own
    }
}

extension ClientConnection {
    /// `mode = "tunnel"`, after the TCP connect. A CONNECT client gets the 200 (with
    /// `Pinproxy-Verdict: tunnel`), then its ClientHello is read (it stays buffered, and goes
    /// upstream as it is) within `handshake_timeout`; a transparent client's ClientHello passed
    /// `tunnelRefusal` before the connect. Nothing is sent upstream before it has.
    func openPassThrough(socket: Int32, address: SocketAddress, for destination: Destination, own: OwnUpstreams.Registration?) {
        let upstream: IO.Endpoint
        do {
            upstream = try io.plain(socket: socket)
        } catch {
            logEvent(.error, "intercept-failed", detail: "cannot relay to \(address): \(error)")
            return close()
        }
        let passage = PassThrough(destination: destination, upstream: upstream, address: address, own: own)
        switch state {
        case .opening:
            break
        case .openingTransparent:
            return startPassThrough(passage)
        case .readingRequest, .readingTransparentHello, .identifying, .resolving, .bindingTunnel, .readingClientHello, .reopening, .clientHandshake,
             .handingOver, .relaying, .refusing, .refusingInTLS, .readingTunnelHello, .passingThrough, .closed:
            upstream.close()
            return unexpected("a tunnel's upstream")
        }
        let reader: IO.HelloReader
        do {
            reader = try io.helloReader()
        } catch {
            upstream.close()
            logEvent(.error, "intercept-failed", detail: "cannot read the client's ClientHello: \(error)")
            return close()
        }
        // The upstream is not read until the relay starts; only its closing can come meanwhile.
        upstream.onEvent = { [weak self] _ in self?.passThroughUpstreamClosed() }
        clientSide.write(Array("HTTP/1.1 200 Connection established\r\nPinproxy-Verdict: tunnel\r\n\r\n".utf8))
        let timer = io.timer(after: config.proxy.handshakeTimeout, repeats: false) { [weak self] in self?.tunnelHelloTimedOut() }
        enter(.readingTunnelHello(passage, reader, timer: timer))
        continueTunnelHello()
    }

    /// More of a tunnel's ClientHello may have arrived.
    func continueTunnelHello() {
        guard case .readingTunnelHello(let passage, let reader, _) = state else { return unexpected("a tunnel ClientHello read") }
        switch io.readHello(reader, from: clientSide) {
        case .incomplete:
            return
        case .unreadable:
            refuseTunnel(.badRequest, "the client's first bytes in the tunnel are not a TLS ClientHello pinproxy can read (or one larger than \(ClientHelloReader.maximumBytes / 1024) KiB): nothing was relayed")
        case .hello(let hello):
            if let (reason, detail) = tunnelRefusal(hello, for: passage.destination) { return refuseTunnel(reason, detail) }
            startPassThrough(passage)
        }
    }

    /// Why a tunnel entry refuses this ClientHello: one that carries `encrypted_client_hello`
    /// hides the name it really wants behind the one the tunnel was opened for.
    func tunnelRefusal(_ hello: ClientHello, for destination: Destination) -> (RefusalReason, String)? {
        guard hello.offersEncryptedClientHello else { return nil }
        return (.destinationMismatch, Admission.echRefusal(host: destination.host, entry: destination.entry))
    }

    private func tunnelHelloTimedOut() {
        guard case .readingTunnelHello = state else { return unexpected("the tunnel ClientHello timer") }
        clientHandshakeFailed("no ClientHello within \(formatSeconds(config.proxy.handshakeTimeout)) of the 200 for a tunnel: closed, nothing relayed")
    }

    private func passThroughUpstreamClosed() {
        guard case .readingTunnelHello(let passage, _, _) = state else { return unexpected("an upstream event before a tunnel's relay") }
        logEvent(.warning, "upstream-closed", detail: "\(passage.destination) (\(passage.address)) closed before the client's ClientHello came")
        close()
    }

    /// A tunnel refused once its 200 has gone out: logged as the connection's decision (status
    /// 200), counted, and closed; not a byte went upstream.
    func refuseTunnel(_ reason: RefusalReason, _ detail: String) {
        record(.init(outcome: .refused, reason: reason, status: 200, detail: detail))
        close()
    }

    /// The decision (`outcome=tunnel`), then the bytes both ways (`ByteRelay`), the ClientHello
    /// first; `idle_timeout` as for any tunnel.
    private func startPassThrough(_ passage: PassThrough<IO.Endpoint>) {
        // The upstream's events now go to the relay.
        passage.upstream.onEvent = nil
        record(.init(outcome: .tunnel, reason: nil, status: 200,
                     detail: "\(passage.destination.entry.name) has mode = \"tunnel\": the client's TLS is relayed to \(passage.address) unverified"))
        let relay = ByteRelay(client: clientSide, upstream: passage.upstream, limit: config.proxy.relayBufferBytes)
        passage.relayStarted = io.now
        passage.lastActivity = io.now
        let idle = config.proxy.idleTimeout
        let idleCheck = io.timer(after: max(0.05, idle / 4), repeats: true) { [weak self] in self?.checkPassThroughIdle() }
        enter(.passingThrough(passage, relay, idleCheck: idleCheck))
        io.tunnelOpened()
        relay.onEvent = { [weak self] event in self?.passThroughEvent(event) }
        relay.start()
    }

    private func passThroughEvent(_ event: ByteRelay<IO.Endpoint>.Event) {
        guard case .passingThrough(let passage, _, _) = state else { return unexpected("a tunnel relay event") }
        switch event {
        case .relayed(let direction, let bytes):
            passage.lastActivity = io.now
            if direction == .up {
                passage.bytesUp += bytes
                io.metrics.relayed(bytesUp: UInt64(bytes), bytesDown: 0)
            } else {
                passage.bytesDown += bytes
                io.metrics.relayed(bytesUp: 0, bytesDown: UInt64(bytes))
            }
        case .ended(let direction):
            if direction == .down, let loop = capturedUpstream(passage) {
                passage.closeReason = loop
                return close()
            }
            if passage.closeReason.isEmpty { passage.closeReason = direction == .up ? "client closed" : "upstream closed" }
        case .finished:
            close()
        case .failed(let client):
            passage.closeReason = (client ? nil : capturedUpstream(passage)) ?? (client ? "client connection error" : "upstream connection error")
            close()
        }
    }

    /// Why the upstream ended, when it was pinproxy's own connection captured by the egress lock:
    /// its ClientHello came back to the transparent listener, which closed it (and logged the loop).
    private func capturedUpstream(_ passage: PassThrough<IO.Endpoint>) -> String? {
        guard passage.own?.captured == true else { return nil }
        return "capture-loop: pinproxy's own connection to \(passage.address) was captured by the egress lock and came back (run pinproxy as a user of exempt_users in [capture])"
    }

    private func checkPassThroughIdle() {
        guard case .passingThrough(let passage, _, _) = state else { return unexpected("the tunnel idle timer") }
        let idle = config.proxy.idleTimeout
        guard io.now - passage.lastActivity >= idle else { return }
        passage.closeReason = "idle for \(formatSeconds(idle))"
        close()
    }
}
