import Glibc
import Foundation
import CLibevent

/// What an admin route answers.
public struct AdminHTTPResponse: Sendable, Equatable {
    public var status: Int
    public var contentType: String
    public var body: [UInt8]

    public init(status: Int, contentType: String, body: [UInt8]) {
        self.status = status
        self.contentType = contentType
        self.body = body
    }

    public init(status: Int, contentType: String, body: String) {
        self.init(status: status, contentType: contentType, body: Array(body.utf8))
    }
}

/// A route handler. It runs on the thread running the server's event base, between other
/// events of that base, so it should be quick and must not block.
public typealias AdminHTTPHandler = @Sendable () -> AdminHTTPResponse

/// Why the admin server could not start.
public enum AdminHTTPServerError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The host is not an IP literal (names are not resolved).
    case notAnIPAddress(String)
    /// `evhttp_new` failed.
    case createFailed
    /// Binding `host:port` failed; `errno` as left by the failing call (0 when unknown).
    case bindFailed(host: String, port: UInt16, errno: Int32)

    public var description: String {
        switch self {
        case .notAnIPAddress(let host):
            return "'\(host)' is not an IP address"
        case .createFailed:
            return "evhttp_new failed"
        case .bindFailed(let host, let port, let code):
            let address = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
            return code == 0 ? "cannot listen on \(address)" : "cannot listen on \(address): \(String(cString: strerror(code)))"
        }
    }
}

/// A small HTTP server for `/metrics` and `/healthz`, on libevent's `evhttp`, sharing an event base
/// the caller runs (for pinproxy, one of the daemon's `EventLoop`s: pass its `base`).
///
/// Routing is by exact path (the query string is ignored): `GET` and `HEAD` reach the route's
/// handler; other methods get 405, unknown paths 404. Responses carry `Content-Type`,
/// `Content-Length` (libevent) and `Cache-Control: no-store`.
///
/// Ownership: the server owns its `evhttp` and frees it exactly once, in `deinit`, which also
/// closes the listening socket and open admin connections. The routing table is handed to
/// libevent as an `Unmanaged` context pointer retained once at `init` and released once in
/// `deinit`, after `evhttp_free` guarantees no callback can use it any more.
///
/// Threading: libevent calls handlers on the thread running the base. Create the server before
/// or on that thread, and release it on that thread or after the loop has stopped; the loop
/// must outlive the server.
public final class AdminHTTPServer: @unchecked Sendable {
    /// The owned `struct evhttp *`.
    private let http: OpaquePointer
    /// The retained routing table passed to libevent as callback context.
    private let router: Unmanaged<Router>
    /// The address the server listens on.
    public let host: String
    /// The port it listens on: the one asked for, or the kernel's choice for port 0.
    public let boundPort: UInt16

    /// Starts listening on `host:port` (an IP literal without brackets: `127.0.0.1`, `::1`;
    /// port 0 picks a free port, see `boundPort`) on `loop`. Requests are served once the
    /// loop runs.
    public init(
        loop: EventLoop,
        host: String,
        port: UInt16,
        routes: [String: AdminHTTPHandler],
        timeoutSeconds: Int32 = 10
    ) throws(AdminHTTPServerError) {
        guard let address = IPAddress(host), !host.hasPrefix("[") else { throw .notAnIPAddress(host) }
        guard let http = evhttp_new(loop.base) else { throw .createFailed }
        errno = 0
        guard let bound = evhttp_bind_socket_with_handle(http, address.description, port) else {
            let code = errno
            evhttp_free(http)
            throw .bindFailed(host: host, port: port, errno: code)
        }
        let fd = evhttp_bound_socket_get_fd(bound)
        self.http = http
        self.host = host
        self.boundPort = Self.localPort(of: fd) ?? port

        // Admin requests are tiny: refuse anything large, cut idle connections.
        evhttp_set_timeout(http, timeoutSeconds)
        evhttp_set_max_headers_size(http, 8 * 1024)
        evhttp_set_max_body_size(http, 1024)

        router = Unmanaged.passRetained(Router(routes: routes))
        evhttp_set_gencb(http, { request, context in
            guard let request, let context else { return }
            Unmanaged<Router>.fromOpaque(context).takeUnretainedValue().handle(request)
        }, router.toOpaque())
    }

    deinit {
        evhttp_free(http)
        router.release()
    }

    /// The local port of a bound socket.
    private static func localPort(of fd: Int32) -> UInt16? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard result == 0 else { return nil }
        switch Int32(storage.ss_family) {
        case AF_INET:
            return withUnsafeBytes(of: &storage) { UInt16(bigEndian: $0.load(as: sockaddr_in.self).sin_port) }
        case AF_INET6:
            return withUnsafeBytes(of: &storage) { UInt16(bigEndian: $0.load(as: sockaddr_in6.self).sin6_port) }
        default:
            return nil
        }
    }

    /// The routing table and the request handling, reached from the C callback.
    private final class Router {
        let routes: [String: AdminHTTPHandler]

        init(routes: [String: AdminHTTPHandler]) {
            self.routes = routes
        }

        func handle(_ request: OpaquePointer) {
            let path = Self.path(of: request)
            let response: AdminHTTPResponse
            var allow: String?
            let isHead = evhttp_request_get_command(request) == EVHTTP_REQ_HEAD
            if let handler = routes[path] {
                switch evhttp_request_get_command(request) {
                case EVHTTP_REQ_GET, EVHTTP_REQ_HEAD:
                    response = handler()
                default:
                    allow = "GET, HEAD"
                    response = AdminHTTPResponse(status: 405, contentType: "text/plain; charset=utf-8",
                                                 body: "method not allowed\n")
                }
            } else {
                response = AdminHTTPResponse(status: 404, contentType: "text/plain; charset=utf-8", body: "not found\n")
            }
            send(response, allow: allow, headOnly: isHead, to: request)
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
        private func send(_ response: AdminHTTPResponse, allow: String?, headOnly: Bool, to request: OpaquePointer) {
            if let headers = evhttp_request_get_output_headers(request) {
                evhttp_add_header(headers, "Content-Type", response.contentType)
                evhttp_add_header(headers, "Cache-Control", "no-store")
                if let allow { evhttp_add_header(headers, "Allow", allow) }
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
            evhttp_send_reply(request, Int32(response.status), Self.reason(response.status), buffer)
        }

        private static func reason(_ status: Int) -> String {
            switch status {
            case 200: return "OK"
            case 404: return "Not Found"
            case 405: return "Method Not Allowed"
            case 500: return "Internal Server Error"
            case 503: return "Service Unavailable"
            default: return "Status"
            }
        }
    }
}
