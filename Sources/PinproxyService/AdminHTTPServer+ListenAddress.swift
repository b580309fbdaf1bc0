import PinproxyInterop
import PinproxyPolicy

extension AdminHTTPServer {
    /// Listens on a config address (`proxy.metrics_listen`) on the event base `base`.
    public convenience init(
        base: OpaquePointer,
        listen: ListenAddress,
        routes: [String: AdminHTTPHandler]
    ) throws(AdminHTTPServerError) {
        try self.init(base: base, host: listen.address.description, port: listen.port, routes: routes)
    }
}
