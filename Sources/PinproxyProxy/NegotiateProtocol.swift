import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import Logging

extension ClientConnection {
    /// Intercept, first: after the 200, read the client's ClientHello (it stays buffered for the real
    /// handshake) to learn its ALPN offer, then settle the protocol: the client gets what the
    /// upstream negotiated when it can (`ALPNAgreement.carries`), else the upstream is reopened
    /// with the client's offer. `timer` is the client's `handshake_timeout`.
    func readClientHello(_ tunnel: Tunnel, timer: IO.Timer) {
        let reader: IO.HelloReader
        do {
            reader = try io.helloReader()
        } catch {
            logEvent(.error, "intercept-failed", detail: "cannot read the client's ClientHello: \(error)")
            return close()
        }
        enter(.readingClientHello(tunnel, reader, timer: timer))
        clientSide.setReading(true)
        // What the client sent with (or right after) its CONNECT is already buffered.
        continueClientHello()
    }

    /// More of the ClientHello may have arrived.
    func continueClientHello() {
        guard case .readingClientHello(let tunnel, let reader, let timer) = state else { return unexpected("a ClientHello read") }
        switch io.readHello(reader, from: clientSide) {
        case .incomplete:
            return
        case .unreadable:
            // The real handshake fails on it, and logs why.
            acceptClientTLS(tunnel, timer: timer)
        case .hello(let hello):
            if ALPNAgreement.carries(upstream: tunnel.applicationProtocol, upstreamOffer: tunnel.upstream.offer, clientOffer: hello.alpn) {
                acceptClientTLS(tunnel, timer: timer)
            } else {
                reopenUpstream(tunnel, for: hello)
            }
        }
    }

    /// Reopen: the client does not offer what the upstream negotiated (state `reopening`). The
    /// upstream connection is closed and opened again, at the same address, offering the
    /// client's list (http/1.1 for a client that offers none); its session, cached once the
    /// verdict admitted it, makes that a resumed handshake where the server allows. The verdict
    /// runs again on it (`evaluateUpstream`), then `admitReopened` continues. The ClientHello
    /// waits in the buffer; the client is still watched, so one that leaves stops the reopening.
    private func reopenUpstream(_ tunnel: Tunnel, for hello: ClientHello) {
        let first = tunnel.upstream.connection
        first.takeSessionTickets()
        first.close()
        let step = dial([tunnel.upstream.address.address], port: tunnel.destination.port)
        enter(.reopening(tunnel.destination, Reopen(hello: hello, first: tunnel.outcome), step))
    }

    /// Reopen, then: the reopened upstream passed the verdict: its decision line, then
    /// the client's handshake with the protocol it negotiated, within a new `handshake_timeout`.
    /// Its verdict may differ from the `first` upstream's, which the 200 described (a report-only
    /// key behind a pinned one, under `enforce = false`): the tunnel goes on as that verdict
    /// allows, and the decision line and a counter say that it changed.
    func admitReopened(_ tunnel: Tunnel, verdict: Verdict, for hello: ClientHello, after first: Verdict.Outcome) {
        let offered = hello.alpn?.description ?? "no ALPN"
        let changed = verdict.outcome != first ? verdict.outcome : nil
        logAdmission(tunnel, verdict: verdict, note: "upstream reopened for the client's ALPN offer (\(offered))", reopenChange: changed)
        let timer = io.timer(after: config.proxy.handshakeTimeout, repeats: false) { [weak self] in self?.clientHandshakeTimedOut() }
        acceptClientTLS(tunnel, timer: timer)
    }
}
