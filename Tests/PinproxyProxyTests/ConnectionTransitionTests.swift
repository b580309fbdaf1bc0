import Foundation
import PinproxyCore
import XCTest
@testable import PinproxyInterop
import PinproxyPolicy
@testable import PinproxyProxy

/// Every state of a `ClientConnection` × every event, on the embedded IO: the state the event
/// leads to, and what every transition keeps true (a state that waits has a deadline; a closed
/// connection has closed both sides, holds no timer, and told its worker once). The impossible
/// events (a late DNS answer in the relay, a timer of a state left) close the connection.
final class ConnectionTransitionTests: XCTestCase {
    typealias Harness = ConnectionHarness

    static let base = try! Harness.config()
    static let inTLS = try! Harness.config(proxy: "refusal = \"in-tls\"")
    static let clients = try! Harness.config("[clients.\"unit:backup.service\"]\nallow = [\"insecure.test\"]\n")

    static let someAddress = IPAddress("198.51.100.7")!
    static let hello = ClientHello(alpn: ALPNOffer([.http11]), serverName: "insecure.test", offersEncryptedClientHello: false)

    // MARK: Bringing a connection into each state

    static func started(_ config: Config = base) -> Harness {
        let harness = Harness(config: config)
        harness.connection.start()
        return harness
    }

    static func requested(_ target: String, _ config: Config = base) -> Harness {
        let harness = started(config)
        harness.plainClient.receive("CONNECT \(target) HTTP/1.1\r\nHost: \(target)\r\n\r\n")
        return harness
    }

    /// DNS answered and the connect done: the upstream handshake, offering `negotiating` back.
    static func handshaking(_ target: String, negotiating: ALPNProtocol? = nil) -> Harness {
        let harness = requested(target)
        harness.io.lookups.last?.done(.success([someAddress]))
        harness.io.dials.last?.work.done(.success(20))
        harness.upstream?.selectedProtocol = negotiating
        return harness
    }

    static func readingClientHello(negotiating: ALPNProtocol? = nil) -> Harness {
        let harness = handshaking("insecure.test:443", negotiating: negotiating)
        harness.upstream?.fire(.connected)
        return harness
    }

    /// The first upstream negotiated h2, and the client offers only http/1.1: reopened.
    static func reopening() -> Harness {
        let harness = readingClientHello(negotiating: .h2)
        harness.io.hello = .hello(hello)
        harness.plainClient.receive("\u{16}")
        return harness
    }

    static func clientHandshake() -> Harness {
        let harness = readingClientHello()
        harness.io.hello = .unreadable
        harness.plainClient.receive("\u{16}")
        return harness
    }

    static func handingOver() -> Harness {
        let harness = clientHandshake()
        harness.client.fire(.connected)
        return harness
    }

    static func transparent(_ host: String) -> Harness {
        let harness = Harness(config: base, listener: .transparent)
        harness.connection.startTransparent(Harness.notRedirected)
        harness.connection.identifyClient(.transparent(host: TargetHost(host)!, original: SocketAddress(address: someAddress, port: 443), hello: hello))
        return harness
    }

    static var states: [(String, () -> Harness)] { [
        ("reading-request", { started() }),
        ("reading-transparent-hello", {
            let harness = Harness(config: base, listener: .transparent)
            harness.connection.startTransparent(Harness.notRedirected)
            return harness
        }),
        ("identifying", {
            let harness = Harness(config: clients)
            harness.io.identity = .pending(PendingIdentity(owner: SocketOwner(state: 1, uid: 1000, inode: 7, cgroupID: 9), user: nil, unit: nil))
            harness.connection.start()
            harness.plainClient.receive("CONNECT insecure.test:443 HTTP/1.1\r\n\r\n")
            return harness
        }),
        ("resolving", { requested("insecure.test:443") }),
        ("binding-tunnel", { transparent("dns-tunnel.test") }),
        ("connecting", {
            let harness = requested("insecure.test:443")
            harness.io.lookups.last?.done(.success([someAddress]))
            return harness
        }),
        ("upstream-handshake", { handshaking("insecure.test:443") }),
        ("checking-command", {
            let harness = handshaking("api.test:443")
            harness.upstream?.fire(.connected)
            return harness
        }),
        // An allow-insecure name on the transparent listener is bound to its addresses: here [resolve]'s.
        ("transparent-connecting", { transparent("bound-insecure.test") }),
        ("transparent-upstream-handshake", {
            let harness = transparent("bound-insecure.test")
            harness.io.dials.last?.work.done(.success(20))
            return harness
        }),
        ("transparent-checking-command", {
            let harness = transparent("api.test")
            harness.io.dials.last?.work.done(.success(20))
            harness.upstream?.fire(.connected)
            return harness
        }),
        ("reading-client-hello", { readingClientHello() }),
        ("reopen-connecting", { reopening() }),
        ("reopen-upstream-handshake", {
            let harness = reopening()
            harness.io.dials.last?.work.done(.success(21))
            return harness
        }),
        ("reopen-checking-command", {
            let harness = handshaking("api.test:443", negotiating: .h2)
            harness.upstream?.fire(.connected)
            harness.io.customChecks.last?(CustomCheckResult(passed: true, detail: ""))
            harness.io.hello = .hello(hello)
            harness.plainClient.receive("\u{16}")
            harness.io.dials.last?.work.done(.success(21))
            harness.upstream?.fire(.connected)
            return harness
        }),
        ("client-handshake", { clientHandshake() }),
        ("handing-over", { handingOver() }),
        ("relaying", {
            let harness = handingOver()
            harness.timers.first { $0.interval == 0 }?.fire()
            return harness
        }),
        ("refusing", {
            let harness = started()
            harness.plainClient.holdsOutput = true
            harness.plainClient.receive("GET / HTTP/1.1\r\n")
            return harness
        }),
        ("refusing-in-tls", { requested("denied.test:443", inTLS) }),
        ("reading-tunnel-hello", {
            let harness = requested("tunnel.test:443")
            harness.io.dials.last?.work.done(.success(20))
            return harness
        }),
        ("passing-through", {
            let harness = requested("tunnel.test:443")
            harness.io.dials.last?.work.done(.success(20))
            harness.io.hello = .hello(ClientHello(alpn: nil, serverName: "tunnel.test", offersEncryptedClientHello: false))
            harness.plainClient.receive("\u{16}")
            return harness
        }),
        ("closed", {
            let harness = started()
            harness.connection.cut("stopping")
            return harness
        }),
    ] }

    // MARK: Events

    /// An event, or nil when its source does not exist in that state (no lookup was ever made, say).
    static var events: [(String, (Harness) -> Bool)] { [
        ("client-data", { $0.client.receive("\u{16}"); return true }),
        ("client-written", { $0.client.flush(); return true }),
        ("client-eof", { $0.client.fire(.eof); return true }),
        ("client-connected", { $0.client.fire(.connected); return true }),
        ("timer", { harness in
            guard let timer = harness.timers.first(where: { !$0.repeats }) ?? harness.timers.first else { return false }
            harness.io.now += timer.interval
            timer.fire()
            return true
        }),
        ("identity", { harness in
            guard let done = harness.io.identifications.last else { return false }
            done(IdentityLookups.Parts(user: "backup", unit: .unit("backup.service"), exe: nil))
            return true
        }),
        ("dns-answer", { harness in
            guard let lookup = harness.io.lookups.last else { return false }
            lookup.done(.success([someAddress]))
            return true
        }),
        ("dns-failure", { harness in
            guard let lookup = harness.io.lookups.last else { return false }
            lookup.done(.failure(DNSFailure(message: "NXDOMAIN")))
            return true
        }),
        ("connect-done", { harness in
            guard let dial = harness.io.dials.last else { return false }
            dial.work.done(.success(30))
            return true
        }),
        ("connect-failed", { harness in
            guard let dial = harness.io.dials.last else { return false }
            dial.work.done(.failure(.failed("Connection refused")))
            return true
        }),
        ("upstream-connected", { harness in
            guard let upstream = harness.upstream else { return false }
            upstream.fire(.connected)
            return true
        }),
        ("upstream-error", { harness in
            guard let upstream = harness.upstream else { return false }
            upstream.fire(.error)
            return true
        }),
        ("renegotiation", { harness in
            guard let upstream = harness.upstream, let callback = upstream.onRenegotiationAttempt else { return false }
            callback()
            return true
        }),
        ("check-answer", { harness in
            guard let done = harness.io.customChecks.last else { return false }
            done(CustomCheckResult(passed: true, detail: ""))
            return true
        }),
        ("relay-ended", { harness in
            guard let relay = harness.io.relays.last, let onEvent = relay.onEvent else { return false }
            onEvent(.ended(.up))
            return true
        }),
        ("cut", { $0.connection.cut("stopping"); return true }),
    ] }

    /// What each event leads to, state by state; "-" where the event's source does not exist.
    /// Columns: client-data, client-written, client-eof, client-connected, timer, identity,
    /// dns-answer, dns-failure, connect-done, connect-failed, upstream-connected, upstream-error,
    /// renegotiation, check-answer, relay-ended, cut.
    static let expected: [String: [String]] = [
        "reading-request": ["reading-request", "closed", "closed", "closed", "closed", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "closed"],
        "reading-transparent-hello": ["reading-transparent-hello", "closed", "closed", "closed", "closed", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "closed"],
        "identifying": ["identifying", "closed", "closed", "closed", "closed", "resolving", "-", "-", "-", "-", "-", "-", "-", "-", "-", "closed"],
        "resolving": ["resolving", "closed", "closed", "closed", "closed", "-", "connecting", "closed", "-", "-", "-", "-", "-", "-", "-", "closed"],
        "binding-tunnel": ["binding-tunnel", "closed", "closed", "closed", "refusing-in-tls", "-", "transparent-connecting", "refusing-in-tls", "-", "-", "-", "-", "-", "-", "-", "closed"],
        "connecting": ["connecting", "closed", "closed", "closed", "closed", "-", "closed", "closed", "upstream-handshake", "closed", "-", "-", "-", "-", "-", "closed"],
        "upstream-handshake": ["upstream-handshake", "closed", "closed", "closed", "closed", "-", "closed", "closed", "closed", "closed", "reading-client-hello", "closed", "closed", "-", "-", "closed"],
        "checking-command": ["checking-command", "closed", "closed", "closed", "closed", "-", "closed", "closed", "closed", "closed", "closed", "closed", "closed", "reading-client-hello", "-", "closed"],
        "transparent-connecting": ["transparent-connecting", "closed", "closed", "closed", "refusing-in-tls", "-", "-", "-", "transparent-upstream-handshake", "refusing-in-tls", "-", "-", "-", "-", "-", "closed"],
        "transparent-upstream-handshake": ["transparent-upstream-handshake", "closed", "closed", "closed", "refusing-in-tls", "-", "-", "-", "closed", "closed", "client-handshake", "refusing-in-tls", "refusing-in-tls", "-", "-", "closed"],
        "transparent-checking-command": ["transparent-checking-command", "closed", "closed", "closed", "refusing-in-tls", "-", "-", "-", "closed", "closed", "closed", "closed", "refusing-in-tls", "client-handshake", "-", "closed"],
        "reading-client-hello": ["reading-client-hello", "reading-client-hello", "closed", "closed", "closed", "-", "closed", "closed", "closed", "closed", "closed", "closed", "closed", "-", "-", "closed"],
        "reopen-connecting": ["reopen-connecting", "reopen-connecting", "closed", "closed", "closed", "-", "closed", "closed", "reopen-upstream-handshake", "closed", "closed", "closed", "closed", "-", "-", "closed"],
        "reopen-upstream-handshake": ["reopen-upstream-handshake", "reopen-upstream-handshake", "closed", "closed", "closed", "-", "closed", "closed", "closed", "closed", "client-handshake", "closed", "closed", "-", "-", "closed"],
        "reopen-checking-command": ["reopen-checking-command", "reopen-checking-command", "closed", "closed", "closed", "-", "closed", "closed", "closed", "closed", "closed", "closed", "closed", "client-handshake", "-", "closed"],
        "client-handshake": ["client-handshake", "client-handshake", "closed", "handing-over", "closed", "-", "closed", "closed", "closed", "closed", "closed", "closed", "closed", "-", "-", "closed"],
        "handing-over": ["handing-over", "handing-over", "handing-over", "handing-over", "relaying", "-", "closed", "closed", "closed", "closed", "closed", "closed", "closed", "-", "-", "closed"],
        "relaying": ["relaying", "relaying", "relaying", "relaying", "relaying", "-", "closed", "closed", "closed", "closed", "closed", "closed", "closed", "-", "relaying", "closed"],
        "refusing": ["refusing", "closed", "closed", "closed", "closed", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "closed"],
        "refusing-in-tls": ["refusing-in-tls", "refusing-in-tls", "closed", "refusing-in-tls", "closed", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "closed"],
        "reading-tunnel-hello": ["reading-tunnel-hello", "reading-tunnel-hello", "closed", "closed", "closed", "-", "-", "-", "closed", "closed", "closed", "closed", "-", "-", "-", "closed"],
        "passing-through": ["passing-through", "passing-through", "passing-through", "passing-through", "passing-through", "-", "-", "-", "closed", "closed", "passing-through", "closed", "-", "-", "-", "closed"],
        "closed": ["closed", "closed", "closed", "closed", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "closed"],
    ]

    func testEveryStateTimesEveryEvent() {
        var table: [String] = []
        var failures: [String] = []
        for (name, drive) in Self.states {
            XCTAssertEqual(drive().state, name, "the driver of \(name) ends elsewhere")
            var row: [String] = []
            for (event, fire) in Self.events {
                let harness = drive()
                guard fire(harness) else {
                    row.append("-")
                    continue
                }
                row.append(harness.state)
                failures += invariants(harness, after: "\(event) in \(name)")
            }
            table.append("(\"\(name)\", [\(row.map { "\"\($0)\"" }.joined(separator: ", "))]),")
            if let expected = Self.expected[name] {
                for (index, (event, _)) in Self.events.enumerated() where expected[index] != row[index] {
                    failures.append("\(event) in \(name): \(row[index]), expected \(expected[index])")
                }
            } else {
                failures.append("no expectations for \(name)")
            }
        }
        XCTAssertEqual(failures, [], "\n" + table.joined(separator: "\n"))
    }

    /// What every transition keeps true.
    private func invariants(_ harness: Harness, after what: String) -> [String] {
        var broken: [String] = []
        if harness.state == "closed" {
            if harness.closes != 1 { broken.append("\(what): the worker was told \(harness.closes) times of the close") }
            if !harness.timers.isEmpty { broken.append("\(what): closed with \(harness.timers.count) timer(s) left") }
            if !(harness.plainClient.closed || harness.plainClient.aborted || harness.client.closed || harness.client.aborted) {
                broken.append("\(what): closed, and the client's socket not")
            }
            for upstream in harness.io.upstreams where !upstream.closed && !(harness.io.relays.last?.closed ?? false) {
                broken.append("\(what): closed, and an upstream not")
            }
        } else {
            if harness.closes != 0 { broken.append("\(what): \(harness.state), yet the worker was told of a close") }
            if harness.timers.isEmpty { broken.append("\(what): \(harness.state) waits without a deadline") }
        }
        return broken
    }
}

/// What the transitions the issue names do besides changing state: the ALPN reopen, the hand-over
/// to the relay, a refusal, and an impossible event.
final class ConnectionEffectTests: XCTestCase {
    typealias Harness = ConnectionHarness
    typealias Table = ConnectionTransitionTests

    /// The 200, then the client's ClientHello does not offer what the upstream negotiated: the
    /// first upstream is closed, and the same address dialled again with the client's offer,
    /// within a new connect deadline (the client's handshake timer is dropped until the
    /// reopened upstream is admitted, which starts a new one).
    func testReopenClosesTheFirstUpstreamAndDialsItsAddressAgain() {
        let harness = Table.readingClientHello(negotiating: .h2)
        XCTAssertEqual(harness.plainClient.text, "HTTP/1.1 200 Connection established\r\nPinproxy-Verdict: insecure\r\n\r\n")
        let first = harness.upstream
        weak var handshakeTimer = harness.timers.first
        XCTAssertNotNil(handshakeTimer)
        harness.io.hello = .hello(Table.hello)
        harness.plainClient.receive("\u{16}")
        XCTAssertEqual(harness.state, "reopen-connecting")
        XCTAssertTrue(first?.closed == true)
        XCTAssertNil(handshakeTimer, "the client's handshake timer outlived reading its ClientHello")
        XCTAssertEqual(harness.io.dials.count, 2)
        XCTAssertEqual(harness.io.dials.last?.address, harness.io.dials.first?.address)
        XCTAssertEqual(harness.timers.map(\.interval), [harness.connection.config.proxy.connectTimeout])
        harness.io.dials.last?.work.done(.success(21))
        XCTAssertEqual(harness.upstream?.offer, ALPNOffer([.http11]))
        harness.upstream?.fire(.connected)
        XCTAssertEqual(harness.state, "client-handshake")
        XCTAssertEqual(harness.timers.map(\.interval), [harness.connection.config.proxy.handshakeTimeout])
        XCTAssertEqual(harness.io.clientTLS.last?.acceptedProtocols, [])
    }

    /// The client's handshake done: the relay takes over on the next pass (a zero timer), with
    /// the client's reading stopped until then; then only the idle check runs.
    func testHandOverWaitsOnePassThenStartsTheRelay() {
        let harness = Table.handingOver()
        XCTAssertEqual(harness.state, "handing-over")
        XCTAssertEqual(harness.timers.map(\.interval), [0])
        XCTAssertFalse(harness.client.reading)
        XCTAssertNil(harness.client.onEvent)
        XCTAssertTrue(harness.io.relays.isEmpty)
        harness.timers.first?.fire()
        XCTAssertEqual(harness.state, "relaying")
        XCTAssertEqual(harness.io.relays.count, 1)
        XCTAssertTrue(harness.io.relays.first?.started == true)
        XCTAssertTrue(harness.timers.allSatisfy(\.repeats))
        XCTAssertEqual(harness.timers.count, 1)
    }

    /// A relay that cannot take the TLS connections over closes the connection.
    func testHandOverThatFailsCloses() {
        let harness = Table.handingOver()
        harness.io.relayFails = true
        harness.timers.first?.fire()
        XCTAssertEqual(harness.state, "closed")
        XCTAssertEqual(harness.closes, 1)
        XCTAssertTrue(harness.upstream?.closed == true)
    }

    /// Plain HTTP is refused with its answer; the connection closes once the answer has gone
    /// out, not before.
    func testRefusalClosesOnceSent() {
        let harness = Table.started()
        harness.plainClient.holdsOutput = true
        harness.plainClient.receive("GET / HTTP/1.1\r\n")
        XCTAssertEqual(harness.state, "refusing")
        XCTAssertTrue(harness.plainClient.text.hasPrefix("HTTP/1.1 403 "), harness.plainClient.text)
        XCTAssertEqual(harness.timers.map(\.interval), [5])
        XCTAssertFalse(harness.plainClient.closed)
        harness.plainClient.flush()
        XCTAssertEqual(harness.state, "closed")
        XCTAssertTrue(harness.plainClient.closed)
    }

    /// A DNS answer that comes after its lookup was abandoned (impossible with a live resolver,
    /// which cancels it) closes the tunnel instead of acting on it.
    func testALateDNSAnswerInTheRelayCloses() {
        let harness = Table.handingOver()
        harness.timers.first?.fire()
        XCTAssertTrue(harness.io.lookups.last?.cancelled == true, "the lookup was not abandoned when the state moved on")
        harness.io.lookups.last?.done(.success([Table.someAddress]))
        XCTAssertEqual(harness.state, "closed")
        XCTAssertTrue(harness.io.relays.last?.closed == true)
        XCTAssertEqual(harness.closes, 1)
    }

    /// The daemon stops during an in-TLS refusal: the responder's timer goes with the connection.
    func testCutDuringAnInTLSRefusalStopsItsTimer() {
        let harness = Table.requested("denied.test:443", Table.inTLS)
        XCTAssertEqual(harness.state, "refusing-in-tls")
        XCTAssertEqual(harness.plainClient.text, "HTTP/1.1 200 Connection established\r\n\r\n")
        XCTAssertEqual(harness.timers.count, 1)
        harness.connection.cut("stopping")
        XCTAssertEqual(harness.state, "closed")
        XCTAssertEqual(harness.timers.count, 0)
    }
}
