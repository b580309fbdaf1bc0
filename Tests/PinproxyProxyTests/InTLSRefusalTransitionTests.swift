import Foundation
import PinproxyCore
import XCTest
@testable import PinproxyInterop
import PinproxyPolicy
@testable import PinproxyProxy

/// Every state of an `InTLSRefusal` × every event, on the embedded IO: the state it leads to and
/// how the exchange ended, with the page (and only the page) written.
final class InTLSRefusalTransitionTests: XCTestCase {
    typealias Refusal = InTLSRefusal<EmbeddedIO>

    /// A responder on an embedded client, and what it reported.
    final class Exchange {
        let io = EmbeddedIO()
        let plain = EmbeddedEndpoint(socket: 10)
        let refusal: Refusal
        private(set) var outcomes: [Refusal.Outcome] = []

        init() {
            let page = RefusalResponse.Page(status: 403, reason: .hostDenied, detail: "denied.test has action = \"deny\"",
                                            proxyStatus: "pinproxy; error=destination_ip_prohibited", host: "denied.test", port: 443,
                                            entry: "hosts.\"denied.test\"", configPath: "pinproxy.toml", presented: [], pinKind: nil, pins: [],
                                            captured: false)
            var finished: (Refusal.Outcome) -> Void = { _ in }
            // A failure here fails every test, with this message.
            guard let refusal = try? Refusal.start(client: plain, answerConnect: true, io: io, host: TargetHost("denied.test")!, bufferLimit: 16_384,
                                                   timeout: 10, page: page, finished: { finished($0) })
            else { preconditionFailure("the embedded IO refused the TLS accept") }
            self.refusal = refusal
            finished = { [unowned self] in outcomes.append($0) }
        }

        var tls: EmbeddedEndpoint { refusal.tls }
        var cell: String { refusal.state.name + (outcomes.isEmpty ? "" : " " + outcomes.map(Self.describe).joined(separator: ",")) }

        static func describe(_ outcome: Refusal.Outcome) -> String {
            switch outcome {
            case .answered: "answered"
            case .handshakeFailed: "handshake-failed"
            case .http2Failed: "http2-failed"
            case .clientClosed: "client-closed"
            case .timedOut: "timed-out"
            case .unexpected: "unexpected"
            }
        }
    }

    static var states: [(String, () -> Exchange)] { [
        ("handshaking", { Exchange() }),
        ("reading-head", {
            let exchange = Exchange()
            exchange.tls.fire(.connected)
            return exchange
        }),
        ("reading-http2", {
            let exchange = Exchange()
            exchange.tls.selectedProtocol = .h2
            exchange.tls.fire(.connected)
            return exchange
        }),
        ("sending", {
            let exchange = Exchange()
            exchange.tls.holdsOutput = true
            exchange.tls.fire(.connected)
            exchange.tls.receive("GET / HTTP/1.1\r\nHost: denied.test\r\n\r\n")
            return exchange
        }),
        ("draining", {
            let exchange = Exchange()
            exchange.tls.fire(.connected)
            exchange.tls.receive("GET / HTTP/1.1\r\n\r\n")
            return exchange
        }),
        ("done", {
            let exchange = Exchange()
            exchange.tls.fire(.eof)
            return exchange
        }),
    ] }

    static var events: [(String, (Exchange) -> Void)] { [
        ("read", { $0.tls.receive("GET / HTTP/1.1\r\n\r\n") }),
        ("written", { $0.tls.flush() }),
        ("eof", { $0.tls.fire(.eof) }),
        ("connected", { $0.tls.fire(.connected) }),
        ("timer", { exchange in exchange.io.liveTimers.first?.fire() }),
    ] }

    /// Columns: read, written, eof, connected, timer.
    static let expected: [String: [String]] = [
        "handshaking": ["handshaking", "handshaking", "done handshake-failed", "reading-head", "done timed-out"],
        "reading-head": ["draining", "reading-head", "done client-closed", "done client-closed", "done timed-out"],
        "reading-http2": ["done http2-failed", "reading-http2", "done client-closed", "done client-closed", "done timed-out"],
        "sending": ["sending", "draining", "done answered", "done answered", "done timed-out"],
        "draining": ["draining", "draining", "done answered", "done answered", "done answered"],
        "done": ["done handshake-failed", "done handshake-failed", "done handshake-failed", "done handshake-failed", "done handshake-failed"],
    ]

    func testEveryStateTimesEveryEvent() {
        var failures: [String] = []
        var table: [String] = []
        for (name, drive) in Self.states {
            XCTAssertEqual(drive().refusal.state.name, name, "the driver of \(name) ends elsewhere")
            var row: [String] = []
            for (event, fire) in Self.events {
                let exchange = drive()
                fire(exchange)
                row.append(exchange.cell)
                if exchange.outcomes.count > 1 { failures.append("\(event) in \(name): finished \(exchange.outcomes.count) times") }
                if case .done = exchange.refusal.state, !exchange.io.liveTimers.isEmpty { failures.append("\(event) in \(name): done with a timer") }
                if case .done = exchange.refusal.state, exchange.tls.onRead != nil || exchange.tls.onEvent != nil || exchange.tls.onWrite != nil {
                    failures.append("\(event) in \(name): done with callbacks left")
                }
                if exchange.refusal.state.name != "done", exchange.io.liveTimers.count != 1 {
                    failures.append("\(event) in \(name): \(exchange.refusal.state.name) with \(exchange.io.liveTimers.count) timers")
                }
            }
            table.append("\"\(name)\": [\(row.map { "\"\($0)\"" }.joined(separator: ", "))],")
            if Self.expected[name] != row { failures.append("\(name): \(row), expected \(Self.expected[name] ?? [])") }
        }
        XCTAssertEqual(failures, [], "\n" + table.joined(separator: "\n"))
    }

    /// Over HTTP/1.1 the page answers the request's head, after the 200 on the plain connection;
    /// a HEAD request gets the head only; close_notify follows once it is out.
    func testThePageAnswersTheRequestThenCloseNotify() {
        let exchange = Exchange()
        XCTAssertEqual(exchange.plain.text, "HTTP/1.1 200 Connection established\r\n\r\n")
        XCTAssertEqual(exchange.io.clientTLS.first?.acceptedProtocols, [.h2, .http11])
        exchange.tls.fire(.connected)
        exchange.tls.receive("HEAD / HTTP/1.1\r\nHost: denied.test\r\n")
        XCTAssertEqual(exchange.tls.text, "")
        exchange.tls.receive("\r\n")
        XCTAssertTrue(exchange.tls.text.hasPrefix("HTTP/1.1 403 "), exchange.tls.text)
        XCTAssertFalse(exchange.tls.text.contains("<html"), "a HEAD request got a body")
        XCTAssertTrue(exchange.tls.shutDown)
        XCTAssertEqual(exchange.refusal.state.name, "draining")
    }

    /// Over h2 the server's SETTINGS go out as soon as the handshake is done.
    func testHTTP2StartsWithTheServersSettings() {
        let exchange = Exchange()
        exchange.tls.selectedProtocol = .h2
        exchange.tls.fire(.connected)
        XCTAssertEqual(exchange.tls.written.count >= 9 ? exchange.tls.written[3] : nil, 0x04, "the first frame is not SETTINGS")
    }
}
