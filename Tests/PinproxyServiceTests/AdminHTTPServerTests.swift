import Glibc
import Foundation
import XCTest
@testable import PinproxyInterop
import PinproxyService

final class AdminHTTPServerTests: XCTestCase {
    /// A real event base on its own thread, a real evhttp listener, real sockets.
    func testServesMetricsAndHealthz() throws {
        let loop = RunningLoop()
        let metrics = ProxyMetrics()
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
        XCTAssertEqual(samples.value("pinproxy_connections_total", ["outcome": "refused", "reason": "pin-mismatch"]), 1)
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
        let loop = RunningLoop()
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
        let loop = RunningLoop()
        for _ in 0..<50 {
            let server = try AdminHTTPServer(loop: loop.loop, host: "127.0.0.1", port: 0, routes: [:])
            XCTAssertNotEqual(server.boundPort, 0)
        }
    }

    func testIPv6Loopback() throws {
        let loop = RunningLoop()
        let server: AdminHTTPServer
        do {
            server = try AdminHTTPServer(loop: loop.loop, host: "::1", port: 0, routes: [:])
        } catch {
            throw XCTSkip("no IPv6 loopback here: \(error)")
        }
        XCTAssertNotEqual(server.boundPort, 0)
        XCTAssertEqual(server.host, "::1")
    }

    func testHostMustBeAnIPLiteral() {
        let loop = RunningLoop()
        for host in ["256.1.1.1", "localhost", "[::1]", ""] {
            XCTAssertThrowsError(try AdminHTTPServer(loop: loop.loop, host: host, port: 0, routes: [:])) { error in
                XCTAssertEqual(error as? AdminHTTPServerError, .notAnIPAddress(host))
            }
        }
    }
}
