import Glibc
import PinproxyCore

/// One plain-HTTP GET over a direct, blocking TCP connection, for the commands only (`diagnose`
/// fetching a leaf's issuer), never for the daemon: no proxy, no redirect, no TLS. It connects to
/// `host`:`port` and nowhere else, and one deadline bounds the connect, the request and the answer.
public enum BlockingHTTPGet {
    /// An answer that is not a 200 with a body of at most the limit.
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// GETs `path` (with `Host: hostHeader`, HTTP/1.0, `Connection: close`) from `host`:`port`
    /// and returns the body of a 200 answer, before `deadline`. Throws `TimedOut`, an
    /// `OpenSSLError` naming the connect's failure, or `Failure` for any other status, a head
    /// over 16 KiB, a body over `limit` bytes, or an answer that ends before its head does.
    public static func body(host: String, port: UInt16, path: String, hostHeader: String, limit: Int,
                            deadline: Deadline) throws -> [UInt8] {
        let socket = try BlockingTLSConnection.connect(host: host, port: port, deadline: deadline)
        defer { close(socket) }
        var request = Array("GET \(path) HTTP/1.0\r\nHost: \(hostHeader)\r\nAccept: */*\r\nConnection: close\r\n\r\n".utf8)
        while !request.isEmpty {
            guard deadline.wait(socket, for: Int16(POLLOUT)) else { throw deadline.timedOut("sending the request to \(host)") }
            let sent = send(socket, request, request.count, Int32(MSG_NOSIGNAL))
            if sent < 0 {
                if errno == EAGAIN || errno == EINTR { continue }
                throw Failure(description: "sending the request to \(host) failed: \(String(cString: strerror(errno)))")
            }
            request.removeFirst(sent)
        }
        let headLimit = 16 * 1024
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while answer.count <= headLimit + limit {
            guard deadline.wait(socket, for: Int16(POLLIN)) else { throw deadline.timedOut("reading the answer of \(host)") }
            let count = recv(socket, &buffer, buffer.count, 0)
            if count < 0 {
                if errno == EAGAIN || errno == EINTR { continue }
                throw Failure(description: "reading the answer of \(host) failed: \(String(cString: strerror(errno)))")
            }
            if count == 0 { break }
            answer += buffer.prefix(count)
        }
        let separator: [UInt8] = Array("\r\n\r\n".utf8)
        guard let end = answer.indices.first(where: { answer[$0...].starts(with: separator) }), end <= headLimit else {
            throw Failure(description: answer.count > headLimit ? "the answer's head is over 16 KiB" : "the answer ended before its head did")
        }
        let statusLine = String(decoding: answer[..<(answer.firstIndex(of: UInt8(ascii: "\r")) ?? end)], as: UTF8.self)
        let parts = statusLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), parts[1] == "200" else {
            throw Failure(description: "the answer was \"\(statusLine.prefix(80))\", not 200")
        }
        let body = Array(answer[(end + separator.count)...])
        guard body.count <= limit else { throw Failure(description: "the answer is over \(limit / 1024) KiB") }
        return body
    }
}
