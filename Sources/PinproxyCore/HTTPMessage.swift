/// A request as `HTTPServer` hands it to its handler.
public struct HTTPRequest: Sendable {
    public enum Method: Sendable {
        case get, head, other
    }

    public let method: Method
    /// The path without query or fragment; "" when it has none.
    public let path: String

    public init(method: Method, path: String) {
        self.method = method
        self.path = path
    }
}

/// What the handler answers: a status, headers in order, and a body (not sent for HEAD).
public struct HTTPResponse: Sendable, Equatable {
    public var status: Int
    public var headers: [HTTPHeader]
    public var body: [UInt8]

    public init(status: Int, headers: [HTTPHeader], body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// The reason phrase of the status line.
    public var reasonPhrase: String {
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

/// One response header.
public struct HTTPHeader: Sendable, Equatable {
    public let name: String
    public let value: String

    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }
}

/// Why an `HTTPServer` could not start.
public enum HTTPServerError: Error, Equatable, Sendable {
    /// `evhttp_new` failed.
    case createFailed
    /// Binding failed; `errno` as left by the failing call (0 when unknown).
    case bindFailed(errno: Int32)
}
