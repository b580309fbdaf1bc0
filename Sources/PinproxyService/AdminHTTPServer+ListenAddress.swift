import FoundationEssentials
import PinproxyInterop
import PinproxyPolicy
import PinproxyCore

extension AdminHTTPServer {
    /// Listens on a config address (`proxy.metrics_listen`) on `loop`.
    public convenience init(
        loop: EventLoop,
        listen: ListenAddress,
        routes: [String: AdminHTTPHandler],
        requestTimeout: TimeInterval = 10,
        maxConnections: Int = AdminHTTPServer.defaultMaxConnections,
        onAcceptError: ((String) -> Void)? = nil
    ) throws(AdminHTTPServerError) {
        try self.init(loop: loop, host: listen.address.description, port: listen.port, routes: routes,
                      requestTimeout: requestTimeout, maxConnections: maxConnections, onAcceptError: onAcceptError)
    }
}
