import Glibc
import Foundation
import XCTest
@testable import PinproxyInterop
import PinproxyService

final class AdminHTTPServerTests: XCTestCase {
    /// A real event base on its own thread, a real evhttp listener, real sockets.
    func testServesMetricsAndHealthz() throws {
        let loop = try RunningLoop()
        let metrics = ProxyMetrics.forTests()
        metrics.connection(outcome: .refused, reason: .pinMismatch)
        metrics.refusal(hostPattern: "api.example.com", reason: .pinMismatch)
        metrics.tunnelOpened()
        final class Health: @unchecked Sendable { var ok = true }
        let health = Health()
        var server: AdminHTTPServer? = try AdminHTTPServer(loop: loop.loop, host: "127.0.0.1", port: 0,
                                                          routes: metrics.adminRoutes(healthy: { health.ok }))
        let port = try XCTUnwrap(server?.boundPort)
        XCTAssertNotEqual(port, 0)
        loop.start()

        let healthz = try httpRequest(port: port, path: "/healthz")
        XCTAssertEqual(healthz.status, 200)
        XCTAssertEqual(healthz.body, "ok\n")
        XCTAssertEqual(healthz.headers["content-type"], "text/plain; charset=utf-8")
        XCTAssertEqual(healthz.headers["cache-control"], "no-store")

        let scrape = try httpRequest(port: port, path: "/metrics")
        XCTAssertEqual(scrape.status, 200)
        XCTAssertEqual(scrape.headers["content-type"], ProxyMetrics.contentType)
        XCTAssertEqual(scrape.headers["content-length"], String(scrape.body.utf8.count))
        let samples = try PrometheusParser.parse(scrape.body)
        XCTAssertEqual(samples.value("pinproxy_connections_total", ["outcome": "refused", "reason": "pin-mismatch", "listener": "connect", "client": "none"]), 1)
        XCTAssertEqual(samples.value("pinproxy_open_tunnels"), 1)

        // Updates between scrapes show up: the handler renders on every request.
        metrics.relayed(bytesUp: 10, bytesDown: 20)
        metrics.tunnelClosed()
        let second = try PrometheusParser.parse(try httpRequest(port: port, path: "/metrics?debug=1").body)
        XCTAssertEqual(second.value("pinproxy_open_tunnels"), 0)
        XCTAssertEqual(second.value("pinproxy_relayed_bytes_total", ["direction": "upstream_to_client"]), 20)

        let head = try httpRequest(port: port, path: "/metrics", method: "HEAD")
        XCTAssertEqual(head.status, 200)
        XCTAssertEqual(head.body, "")
        XCTAssertGreaterThan(Int(head.headers["content-length"] ?? "") ?? 0, 1000)

        XCTAssertEqual(try httpRequest(port: port, path: "/nope").status, 404)
        XCTAssertEqual(try httpRequest(port: port, path: "/metrics/").status, 404)
        let post = try httpRequest(port: port, path: "/metrics", method: "POST")
        XCTAssertEqual(post.status, 405)
        XCTAssertEqual(post.headers["allow"], "GET, HEAD")

        health.ok = false
        let unhealthy = try httpRequest(port: port, path: "/healthz")
        XCTAssertEqual(unhealthy.status, 503)

        loop.stop()
        server = nil
        _ = server
    }

    func testBindConflictIsAnErrorAndDeinitFreesTheListenerAndTheRoutes() throws {
        let loop = try RunningLoop()
        final class Token: Sendable {}
        weak var weakToken: Token?
        var first: AdminHTTPServer?
        do {
            let token = Token()
            weakToken = token
            first = try AdminHTTPServer(loop: loop.loop, host: "127.0.0.1", port: 0, routes: [
                "/token": { _ = token; return AdminHTTPResponse(status: 200, contentType: "text/plain", body: "t") },
            ])
        }
        let port = try XCTUnwrap(first?.boundPort)
        XCTAssertNotNil(weakToken, "the server must keep its routes alive")

        XCTAssertThrowsError(try AdminHTTPServer(loop: loop.loop, host: "127.0.0.1", port: port, routes: [:])) { error in
            XCTAssertEqual(error as? AdminHTTPServerError, .bindFailed(host: "127.0.0.1", port: port, errno: EADDRINUSE))
        }

        loop.start()
        XCTAssertEqual(try httpRequest(port: port, path: "/token").body, "t")
        loop.stop()

        // evhttp_free closed the listener (the port binds again) and the routing context was
        // released exactly once (the captured token is gone; an extra release would crash).
        first = nil
        XCTAssertNil(weakToken, "the routing table leaked")
        let again = try AdminHTTPServer(loop: loop.loop, host: "127.0.0.1", port: port, routes: [:])
        XCTAssertEqual(again.boundPort, port)
    }

    func testManyServersCreatedAndFreed() throws {
        let loop = try RunningLoop()
        for _ in 0..<50 {
            let server = try AdminHTTPServer(loop: loop.loop, host: "127.0.0.1", port: 0, routes: [:])
            XCTAssertNotEqual(server.boundPort, 0)
        }
    }

    func testIPv6Loopback() throws {
        let loop = try RunningLoop()
        let server: AdminHTTPServer
        do {
            server = try AdminHTTPServer(loop: loop.loop, host: "::1", port: 0, routes: [:])
        } catch {
            throw XCTSkip("no IPv6 loopback here: \(error)")
        }
        XCTAssertNotEqual(server.boundPort, 0)
        XCTAssertEqual(server.host, "::1")
    }

    func testHostMustBeAnIPLiteral() throws {
        let loop = try RunningLoop()
        for host in ["256.1.1.1", "localhost", "[::1]", ""] {
            XCTAssertThrowsError(try AdminHTTPServer(loop: loop.loop, host: host, port: 0, routes: [:])) { error in
                XCTAssertEqual(error as? AdminHTTPServerError, .notAnIPAddress(host))
            }
        }
    }

    /// A client dripping one header byte at a time is cut off at the deadline, although every
    /// byte restarts evhttp's own timeout; at the connection limit, the next client waits until
    /// a slot frees, then is served.
    func testDeadlineCutsADripperAndTheLimitHoldsTheNextClientBack() throws {
        let loop = try RunningLoop()
        let server = try AdminHTTPServer(loop: loop.loop, host: "127.0.0.1", port: 0, routes: [
            "/healthz": { AdminHTTPResponse(status: 200, contentType: "text/plain", body: "ok\n") },
        ], requestTimeout: 1, maxConnections: 1)
        loop.start()
        defer { loop.stop() }

        // The dripper takes the only slot: one answered keep-alive request, then a request that
        // never ends, one byte at a time.
        let dripper = try connectLoopback(port: server.boundPort)
        defer { close(dripper) }
        let first = Array("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
        XCTAssertEqual(send(dripper, first, first.count, Int32(MSG_NOSIGNAL)), first.count)
        XCTAssertTrue(waitReadable(dripper, timeout: 10))
        var head = [UInt8](repeating: 0, count: 4096)
        XCTAssertGreaterThan(recv(dripper, &head, head.count, 0), 0)

        let waiting = try connectLoopback(port: server.boundPort)
        defer { close(waiting) }
        let request = Array("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8)
        XCTAssertEqual(send(waiting, request, request.count, Int32(MSG_NOSIGNAL)), request.count)

        var dripperClosed = false
        let drip = Array("GET /".utf8)
        let deadline = Date().addingTimeInterval(10)
        var sent = 0
        while Date() < deadline {
            var byte = drip[sent % drip.count]
            if send(dripper, &byte, 1, Int32(MSG_NOSIGNAL)) < 0 {
                dripperClosed = true
                break
            }
            sent += 1
            if waitReadable(dripper, timeout: 0.1) {
                if recv(dripper, &head, head.count, 0) <= 0 { dripperClosed = true; break }
            }
            XCTAssertFalse(waitReadable(waiting, timeout: 0), "served beyond the connection limit")
        }
        XCTAssertTrue(dripperClosed, "a dripping client must be cut off by the deadline")

        // The slot is free: the waiting client is served.
        XCTAssertTrue(waitReadable(waiting, timeout: 10))
        var answer = [UInt8](repeating: 0, count: 64)
        let count = recv(waiting, &answer, answer.count, 0)
        XCTAssertGreaterThan(count, 0)
        XCTAssertTrue(String(decoding: answer.prefix(max(0, count)), as: UTF8.self).hasPrefix("HTTP/1.1 200"))
    }

    private func connectLoopback(port: UInt16) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw HTTPClientError.connectFailed(errno) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            throw HTTPClientError.connectFailed(errno)
        }
        return fd
    }
}
