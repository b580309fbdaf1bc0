import Foundation
import PinproxyInterop
import PinproxyPolicy

extension ClientConnection {
    /// Step 8a: after the 200, read the client's ClientHello (it stays buffered for the real
    /// handshake) to learn its ALPN offer, then settle the protocol: the client gets what the
    /// upstream negotiated when it can (`ALPNAgreement.carries`), else the upstream is reopened
    /// with the client's offer.
    func readClientHello() {
        do {
            clientHelloReader = try ClientHelloReader()
        } catch {
            logEvent(.error, "intercept-failed", detail: "cannot read the client's ClientHello: \(error)")
            return close()
        }
        clientSide.onRead = { [weak self] in self?.continueClientHello() }
        clientSide.onEvent = { [weak self] _ in
            self?.logEvent(.warning, "client-handshake-failed", detail: "the client closed the connection before its ClientHello was complete")
            self?.close()
        }
        clientSide.setReading(true)
        continueClientHello()
    }

    private func continueClientHello() {
        guard phase == .clientHandshake, let reader = clientHelloReader else { return }
        switch reader.read(from: clientSide) {
        case .incomplete:
            return
        case .unreadable:
            // The real handshake fails on it, and logs why.
            acceptClientTLS()
        case .hello(let hello):
            if ALPNAgreement.carries(upstream: upstreamProtocol, upstreamOffer: upstreamOffer, clientOffer: hello.alpn) {
                acceptClientTLS()
            } else {
                reopenUpstream(for: hello)
            }
        }
    }

    /// Step 8b: the client does not offer what the upstream negotiated. The upstream connection
    /// is closed and opened again, at the same address, offering the client's list (http/1.1
    /// for a client that offers none); its session, cached once the verdict admitted it, makes
    /// that a resumed handshake where the server allows. The verdict runs again on it
    /// (`evaluateUpstream`), then `admitReopened` continues. The ClientHello waits in the buffer.
    private func reopenUpstream(for hello: ClientHello) {
        guard let upstreamAddress else { return close() }
        clientSide.setReading(false)
        clientSide.onRead = nil
        clientHelloReader = nil
        reopenedFor = hello
        upstream?.takeSessionTickets()
        upstream?.close()
        upstream = nil
        verdict = nil
        upstreamOffer = ALPNAgreement.reopenOffer(for: hello.alpn)
        teardownPhase()
        connect(to: [upstreamAddress.address])
    }

    /// Step 8b (continued): the reopened upstream passed the verdict: its decision line, then
    /// the client's handshake with the protocol it negotiated.
    func admitReopened() {
        let offered = reopenedFor?.alpn?.description ?? "no ALPN"
        logAdmission(note: "upstream reopened for the client's ALPN offer (\(offered))")
        acceptClientTLS()
    }
}
