import Foundation
import Logging
import PinproxyInterop
import PinproxyPolicy

/// One client connection through its whole life: parse CONNECT → look up policy → resolve →
/// connect → upstream TLS → evaluate → respond → intercept (read the ClientHello; when the
/// client does not offer what the upstream negotiated, reopen the upstream with the client's
/// offer: connect → upstream TLS → evaluate again) → relay. Each step lives in the file named
/// after it; all of them run on the connection's worker loop.
final class ClientConnection {
    /// Where the connection is in its life.
    enum Phase {
        case readingRequestLine, readingHeaders, resolving, connecting, upstreamHandshake, clientHandshake, relaying, closing, closed
    }

    let worker: Worker
    let client: SocketAddress?
    /// The config snapshot taken at accept; a reload never changes it.
    let config: Config
    var clientSide: BufferEvent
    var upstream: BufferEvent?
    var phase = Phase.readingRequestLine

    var target: (TargetHost, UInt16)?
    var entry: PolicyEntry?
    var verdict: Verdict?
    var destinations: [IPAddress] = []
    var upstreamAddress: SocketAddress?
    var headerBytes = 0
    var headerLines = 0

    /// The timer of the current step (request, DNS, handshake, idle); replacing it cancels the old one.
    var phaseTimer: PinproxyInterop.Timer? {
        willSet { phaseTimer?.cancel() }
    }
    var dnsRequest: DNSRequest?
    var connector: TCPConnector?

    var handshakeStarted: Date?
    var resumed = false
    /// The 200 has been sent: a refusal from now on (the reopened upstream) can only cut the
    /// client's TLS handshake off.
    var connectAnswered = false
    /// What the upstream is offered: `ALPNOffer.upstreamDefault`, then the client's own offer
    /// if the upstream is reopened for it.
    var upstreamOffer = ALPNOffer.upstreamDefault
    /// What the upstream negotiated, which is what the client gets.
    var upstreamProtocol: ALPNProtocol?
    /// Reads the client's ClientHello after the 200 (`NegotiateProtocol.swift`).
    var clientHelloReader: ClientHelloReader?
    /// Set when the upstream was reopened for this ClientHello's offer.
    var reopenedFor: ClientHello?
    var relayStarted: Date?
    var lastActivity: TimeInterval = 0
    var bytesUp = 0
    var bytesDown = 0
    /// Directions whose source has stopped sending, and those whose sink has been told so.
    var ended: Set<Direction> = []
    var shutDown: Set<Direction> = []
    var closeReason = ""

    init(worker: Worker, socket: Int32, client: SocketAddress?, config: Config) {
        self.worker = worker
        self.client = client
        self.config = config
        self.clientSide = BufferEvent(loop: worker.loop, socket: socket)
    }

    /// Step 1 (after accept): read the request within `request_timeout`.
    func start() {
        clientSide.onRead = { [weak self] in self?.readRequest() }
        clientSide.onEvent = { [weak self] _ in
            // The client went away before its request was complete.
            self?.close()
        }
        phaseTimer = Timer(loop: worker.loop, after: config.proxy.requestTimeout) { [weak self] in
            guard let self else { return }
            self.logEvent(.warning, "request-timeout", detail: "no complete CONNECT request within \(formatSeconds(self.config.proxy.requestTimeout)): closed")
            self.close()
        }
        clientSide.setReading(true)
    }

    /// Cancels whatever the current step is waiting for.
    func teardownPhase() {
        phaseTimer = nil
        dnsRequest?.cancel()
        dnsRequest = nil
        connector?.cancel()
        connector = nil
    }

    /// Closes both sides, logs the tunnel if one was open, and leaves the worker.
    func close() {
        guard phase != .closed else { return }
        phase = .closed
        teardownPhase()
        clientSide.close()
        upstream?.close()
        upstream = nil
        if let relayStarted, let (host, port) = target {
            let duration = Date().timeIntervalSince(relayStarted)
            worker.shared.tunnelClosed()
            worker.shared.log.emit(.info, "tunnel-closed", [
                (.client, client?.description ?? "-"), (.host, host.description), (.port, String(port)),
                (.entry, entry?.name ?? "-"), (.alpn, upstreamProtocol?.description ?? "-"),
                (.bytesUp, String(bytesUp)), (.bytesDown, String(bytesDown)),
                (.duration, String(format: "%.3f", duration)), (.detail, closeReason),
            ])
        }
        worker.remove(self)
    }
}

/// `10s` or `0.5s`.
func formatSeconds(_ seconds: TimeInterval) -> String {
    seconds == seconds.rounded() ? "\(Int(seconds))s" : "\(seconds)s"
}
