import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import Logging

extension ClientConnection {
    /// The transparent listener's ClientHello (after accept on `transparent_listen`): the client sent no CONNECT,
    /// so its ClientHello says which host it wants. It is read within `request_timeout` and
    /// stays buffered for the real handshake; `addresses` were read from the socket at accept.
    func startTransparent(_ addresses: ConnectionAddresses) {
        watchClient()
        let reader: IO.HelloReader
        do {
            reader = try io.helloReader()
        } catch {
            logEvent(.error, "intercept-failed", detail: "cannot read the client's ClientHello: \(error)")
            return close()
        }
        let timer = io.timer(after: config.proxy.requestTimeout, repeats: false) { [weak self] in self?.transparentHelloTimedOut() }
        enter(.readingTransparentHello(addresses, reader, timer: timer))
        clientSide.setReading(true)
    }

    /// More of the ClientHello may have arrived.
    func continueTransparentHello() {
        guard case .readingTransparentHello(let addresses, let reader, _) = state else { return unexpected("a transparent ClientHello read") }
        switch io.readHello(reader, from: clientSide) {
        case .incomplete:
            return
        case .unreadable:
            refuse(.badRequest, "the client's first bytes are not a TLS ClientHello (or one larger than \(ClientHelloReader.maximumBytes / 1024) KiB): the transparent listener takes TLS only")
        case .hello(let hello):
            routeTransparent(hello, addresses: addresses)
        }
    }

    private func transparentHelloTimedOut() {
        guard case .readingTransparentHello = state else { return unexpected("the ClientHello timer") }
        logEvent(.warning, "request-timeout", detail: "no complete ClientHello within \(formatSeconds(config.proxy.requestTimeout)): closed")
        close()
    }
}
