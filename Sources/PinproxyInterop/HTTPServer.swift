import Glibc
import FoundationEssentials
import CLibevent
import PinproxyCore

/// A small HTTP server on libevent's `evhttp`, sharing an event base the caller runs (pass an
/// `EventLoop`). Every request goes to one handler, which sees its method and path and
/// decides the answer; responses carry the handler's headers and `Content-Length` (for HEAD,
/// that of the body, which is not sent).
///
/// Limits: evhttp's own timeout restarts on every byte read, so a client dripping a header
/// byte at a time could hold a connection for ever. Each connection therefore also has a
/// total deadline, `requestTimeout` from its accept or from the last answer it got, when it
/// is shut down whatever it is doing. At most `maxConnections` are open at once: at the limit,
/// accepting stops (further clients wait in the kernel's backlog) until one closes. An accept
/// error (out of descriptors, say) pauses accepting for `Listener.pauseAfterError` and is
/// reported once per pause through `onAcceptError`, instead of libevent retrying and
/// logging at once. Headers are limited to 8 KiB and bodies to 1 KiB.
///
/// Ownership: the server owns its `evhttp` and frees it exactly once, in `deinit`, which also
/// closes the listening socket and open connections. The handler and the
/// connection gate are handed to libevent as `Unmanaged` context pointers retained once at
/// `init` and released once in `deinit`, after `evhttp_free` guarantees no server callback can
/// use them any more. The gate holds a reference to each connection's bufferevent until
/// evhttp has freed it (see `Gate`).
///
/// Threading: libevent calls the handler on the thread running the base, between other
/// events of that base, so it should be quick and must not block. Create the server before
/// or on that thread, and release it on that thread or after the loop has stopped; the loop
/// must outlive the server.
public final class HTTPServer: @unchecked Sendable {
    /// The owned `struct evhttp *`.
    private let http: OpaquePointer
    /// The retained handler passed to libevent as callback context.
    private let router: Unmanaged<Router>
    /// The retained connection gate passed to libevent as callback context.
    private let gate: Unmanaged<Gate>
    /// The port it listens on: the one asked for, or the kernel's choice for port 0.
    public let boundPort: UInt16
    /// The address and port it listens on.
    public var boundAddress: SocketAddress { SocketAddress(address: address, port: boundPort) }
    private let address: IPAddress

    /// Starts listening on `address:port` (port 0 picks a free port, see `boundPort`) on
    /// `loop`. Requests are served once the loop runs; `maxConnections` is at least 1.
    public init(
        loop: EventLoop,
        address: IPAddress,
        port: UInt16,
        requestTimeout: TimeInterval,
        maxConnections: Int,
        onAcceptError: ((String) -> Void)?,
        handler: @escaping (HTTPRequest) -> HTTPResponse
    ) throws(HTTPServerError) {
        guard let http = evhttp_new(loop.base) else { throw .createFailed }
        errno = 0
        guard let bound = evhttp_bind_socket_with_handle(http, address.description, port) else {
            let code = errno
            evhttp_free(http)
            throw .bindFailed(errno: code)
        }
        let fd = evhttp_bound_socket_get_fd(bound)
        self.http = http
        self.address = address
        self.boundPort = SocketAddress.local(of: fd)?.port ?? port

        // Requests are tiny: refuse anything large, cut idle connections.
        var idle = timeval(requestTimeout)
        evhttp_set_timeout_tv(http, &idle)
        evhttp_set_max_headers_size(http, 8 * 1024)
        evhttp_set_max_body_size(http, 1024)

        router = Unmanaged.passRetained(Router(handler: handler))
        gate = Unmanaged.passRetained(Gate(loop: loop, listener: evhttp_bound_socket_get_listener(bound),
                                           deadline: requestTimeout, maxConnections: max(1, maxConnections),
                                           onAcceptError: onAcceptError))
        let gate = self.gate
        router.takeUnretainedValue().answered = { request in gate.takeUnretainedValue().answered(request) }
        evhttp_set_gencb(http, { request, context in
            guard let request, let context else { return }
            Unmanaged<Router>.fromOpaque(context).takeUnretainedValue().handle(request)
        }, router.toOpaque())
        evhttp_set_bevcb(http, { base, context in
            guard let base, let context else { return nil }
            return Unmanaged<Gate>.fromOpaque(context).takeUnretainedValue().open(on: base)
        }, gate.toOpaque())
        gate.takeUnretainedValue().watchAcceptErrors()
    }

    deinit {
        gate.takeUnretainedValue().serverFreed()
        evhttp_free(http)
        gate.takeUnretainedValue().releaseAll()
        router.release()
        gate.release()
    }

    /// The handler and the replies, reached from the C callback.
    private final class Router {
        let handler: (HTTPRequest) -> HTTPResponse
        /// Told of each request once its answer is queued.
        var answered: ((OpaquePointer) -> Void)?

        init(handler: @escaping (HTTPRequest) -> HTTPResponse) {
            self.handler = handler
        }

        func handle(_ request: OpaquePointer) {
            let method: HTTPRequest.Method
            switch evhttp_request_get_command(request) {
            case EVHTTP_REQ_GET: method = .get
            case EVHTTP_REQ_HEAD: method = .head
            default: method = .other
            }
            let response = handler(HTTPRequest(method: method, path: Self.path(of: request)))
            answered?(request)
            send(response, headOnly: method == .head, to: request)
        }

        /// The request's path without query or fragment; "" when it has none.
        private static func path(of request: OpaquePointer) -> String {
            guard let uri = evhttp_request_get_evhttp_uri(request), let path = evhttp_uri_get_path(uri) else {
                return ""
            }
            return String(cString: path)
        }

        /// Sends `response`; for HEAD, its headers (with the body's `Content-Length`) only,
        /// since evhttp itself would send the body.
        private func send(_ response: HTTPResponse, headOnly: Bool, to request: OpaquePointer) {
            if let headers = evhttp_request_get_output_headers(request) {
                for header in response.headers { evhttp_add_header(headers, header.name, header.value) }
                if headOnly { evhttp_add_header(headers, "Content-Length", String(response.body.count)) }
            }
            guard let buffer = evbuffer_new() else {
                evhttp_send_error(request, 500, nil)
                return
            }
            defer { evbuffer_free(buffer) }
            if !headOnly {
                response.body.withUnsafeBytes { raw in
                    if let base = raw.baseAddress { _ = evbuffer_add(buffer, base, raw.count) }
                }
            }
            evhttp_send_reply(request, Int32(response.status), response.reasonPhrase, buffer)
        }
    }
}

extension HTTPServer {
    /// Counts the connections and gives each its deadline; stops and resumes accepting.
    ///
    /// evhttp asks `open(on:)` for each accepted connection's bufferevent. The gate makes it,
    /// and keeps one reference to it of its own: when evhttp frees the connection, the
    /// bufferevent (and so the descriptor, which it closes once freed) stays until the gate lets
    /// go. Until then the descriptor is this connection's, so the deadline can safely shut it
    /// down. evhttp's freeing clears the bufferevent's callbacks; a sweep while connections are
    /// open notices that within `sweepInterval`, drops the reference and counts the
    /// connection closed.
    fileprivate final class Gate {
        let loop: EventLoop
        let deadline: TimeInterval
        let maxConnections: Int
        let onAcceptError: ((String) -> Void)?
        /// evhttp's listener; nil once the server is gone.
        private var listener: OpaquePointer?
        /// Open connections by their bufferevent.
        private var connections: [OpaquePointer: Connection] = [:]
        private var pause: Timer?
        private var sweep: Timer?

        /// How soon a connection evhttp has freed is counted closed (and its descriptor closed).
        static let sweepInterval: TimeInterval = 0.05

        init(loop: EventLoop, listener: OpaquePointer?, deadline: TimeInterval, maxConnections: Int, onAcceptError: ((String) -> Void)?) {
            self.loop = loop
            self.listener = listener
            self.deadline = deadline
            self.maxConnections = maxConnections
            self.onAcceptError = onAcceptError
        }

        /// The bufferevent for a connection evhttp has just accepted.
        func open(on base: OpaquePointer) -> OpaquePointer? {
            guard let socket = bufferevent_socket_new(base, -1, Int32(BEV_OPT_CLOSE_ON_FREE.rawValue)) else { return nil }
            bufferevent_incref(socket)
            let connection = Connection(socket: socket)
            connections[socket] = connection
            restartDeadline(of: connection)
            if sweep == nil {
                sweep = Timer(loop: loop, after: Self.sweepInterval, repeats: true) { [unowned self] in self.collectFreed() }
            }
            updateListener()
            return socket
        }

        /// A request on one of the connections has been answered: its next request gets a
        /// deadline of its own.
        func answered(_ request: OpaquePointer) {
            guard let connection = evhttp_request_get_connection(request),
                  let socket = evhttp_connection_get_bufferevent(connection),
                  let open = connections[socket] else { return }
            restartDeadline(of: open)
        }

        private func restartDeadline(of connection: Connection) {
            connection.deadline = Timer(loop: loop, after: deadline) { [weak connection] in
                connection?.shutDown()
            }
        }

        /// Lets go of the connections evhttp has freed.
        private func collectFreed() {
            for (socket, connection) in connections where connection.isFreedByEvhttp {
                connection.release()
                connections.removeValue(forKey: socket)
            }
            if connections.isEmpty { sweep = nil }
            updateListener()
        }

        /// Routes the listener's accept errors here (they would otherwise be logged by
        /// libevent on every retry).
        func watchAcceptErrors() {
            guard let listener else { return }
            let gate = UInt(bitPattern: Unmanaged.passUnretained(self).toOpaque())
            Self.byListener.withLock { $0[UInt(bitPattern: listener)] = gate }
            evconnlistener_set_error_cb(listener) { listener, _ in
                let code = errno
                guard let listener, let address = Gate.byListener.withLock({ $0[UInt(bitPattern: listener)] }),
                      let pointer = UnsafeRawPointer(bitPattern: address) else { return }
                Unmanaged<Gate>.fromOpaque(pointer).takeUnretainedValue().acceptFailed(String(cString: strerror(code)))
            }
        }

        /// Gates (their addresses) by listener, for the error callback, whose context pointer
        /// is evhttp's. A gate is listed from `watchAcceptErrors` to `serverFreed`, while its
        /// server, which retains it, lives.
        private static let byListener = Locked<[UInt: UInt]>([:])

        private func acceptFailed(_ reason: String) {
            guard pause == nil else { return }
            pause = Timer(loop: loop, after: Listener.pauseAfterError) { [weak self] in
                self?.pause = nil
                self?.updateListener()
            }
            updateListener()
            onAcceptError?(reason)
        }

        /// Accepts while no pause runs and connections are below the limit.
        private func updateListener() {
            guard let listener else { return }
            if pause == nil && connections.count < maxConnections {
                evconnlistener_enable(listener)
            } else {
                evconnlistener_disable(listener)
            }
        }

        /// The server is about to free evhttp (and the listener and connections with it); the
        /// connections' bufferevents are let go of afterwards.
        func serverFreed() {
            if let listener { _ = Self.byListener.withLock { $0.removeValue(forKey: UInt(bitPattern: listener)) } }
            listener = nil
            pause = nil
            sweep = nil
        }

        /// After `evhttp_free`: every connection is freed by evhttp now.
        func releaseAll() {
            for connection in connections.values { connection.release() }
            connections.removeAll()
        }
    }

    /// One connection: its bufferevent, with the gate's reference to it, and its deadline.
    fileprivate final class Connection {
        let socket: OpaquePointer
        var deadline: Timer?
        private var released = false

        init(socket: OpaquePointer) {
            self.socket = socket
        }

        /// evhttp's `bufferevent_free` (or reset) clears the callbacks; evhttp sets an event
        /// callback on every connection it keeps.
        var isFreedByEvhttp: Bool {
            var eventCallback: bufferevent_event_cb?
            bufferevent_getcb(socket, nil, nil, &eventCallback, nil)
            return eventCallback == nil
        }

        /// The deadline passed: evhttp reads end-of-file (or fails to write) and frees the
        /// connection. The descriptor is still this connection's: the gate's reference keeps
        /// the bufferevent, which closes it, alive.
        func shutDown() {
            deadline = nil
            let fd = bufferevent_getfd(socket)
            if fd >= 0 { Glibc.shutdown(fd, Int32(SHUT_RDWR)) }
        }

        /// Drops the gate's reference: the bufferevent is freed and closes the descriptor.
        func release() {
            deadline = nil
            guard !released else { return }
            released = true
            bufferevent_decref(socket)
        }
    }
}
