import FoundationEssentials
import PinproxyCore
import PinproxyInterop

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
            return code == 0 ? "cannot listen on \(address)" : "cannot listen on \(address): \(ProcessEnvironment.errorText(code))"
        }
    }
}

/// The admin server for `/metrics` and `/healthz`, on an `HTTPServer` sharing an event base the
/// caller runs (for pinproxy, one of the daemon's `EventLoop`s).
///
/// Routing is by exact path (the query string is ignored): `GET` and `HEAD` reach the route's
/// handler; other methods get 405, unknown paths 404. Responses carry `Content-Type`,
/// `Content-Length` and `Cache-Control: no-store`. Connections are limited as `HTTPServer`
/// says: a total deadline of `requestTimeout` per request, at most `maxConnections` open.
public final class AdminHTTPServer: Sendable {
    private let server: HTTPServer
    /// The address the server listens on.
    public let host: String
    /// The port it listens on: the one asked for, or the kernel's choice for port 0.
    public var boundPort: UInt16 { server.boundPort }
    /// The address and port it listens on.
    public var boundAddress: SocketAddress { server.boundAddress }

    /// Admin connections open at most, by default.
    public static let defaultMaxConnections = 16

    /// Starts listening on `host:port` (an IP literal without brackets: `127.0.0.1`, `::1`;
    /// port 0 picks a free port, see `boundPort`) on `loop`. Requests are served once the
    /// loop runs.
    public init(
        loop: EventLoop,
        host: String,
        port: UInt16,
        routes: [String: AdminHTTPHandler],
        requestTimeout: TimeInterval = 10,
        maxConnections: Int = AdminHTTPServer.defaultMaxConnections,
        onAcceptError: ((String) -> Void)? = nil
    ) throws(AdminHTTPServerError) {
        guard let address = IPAddress(host), !host.hasPrefix("[") else { throw .notAnIPAddress(host) }
        do throws(HTTPServerError) {
            server = try HTTPServer(loop: loop, address: address, port: port, requestTimeout: requestTimeout,
                                    maxConnections: maxConnections, onAcceptError: onAcceptError) { request in
                Self.answer(request, routes: routes)
            }
        } catch {
            switch error {
            case .createFailed: throw .createFailed
            case .bindFailed(let code): throw .bindFailed(host: host, port: port, errno: code)
            }
        }
        self.host = host
    }

    /// The route's answer to `request`, with the headers every answer carries.
    static func answer(_ request: HTTPRequest, routes: [String: AdminHTTPHandler]) -> HTTPResponse {
        var allow: String?
        let response: AdminHTTPResponse
        if let handler = routes[request.path] {
            switch request.method {
            case .get, .head:
                response = handler()
            case .other:
                allow = "GET, HEAD"
                response = AdminHTTPResponse(status: 405, contentType: "text/plain; charset=utf-8", body: "method not allowed\n")
            }
        } else {
            response = AdminHTTPResponse(status: 404, contentType: "text/plain; charset=utf-8", body: "not found\n")
        }
        var headers = [HTTPHeader("Content-Type", response.contentType), HTTPHeader("Cache-Control", "no-store")]
        if let allow { headers.append(HTTPHeader("Allow", allow)) }
        return HTTPResponse(status: response.status, headers: headers, body: response.body)
    }
}
