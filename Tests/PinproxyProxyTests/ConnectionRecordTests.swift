import Foundation
import PinproxyCore
import XCTest
import PinproxyInterop
import PinproxyPolicy
@testable import PinproxyProxy
import PinproxyService

/// The one connection record, in every mode: what a connection records (on the embedded IO),
/// the lines it makes, and the metrics the recorder counts from it. The client's identity and
/// its `client` label are the same on the decision and on the tunnel's end whatever the mode.
final class ConnectionRecordTests: XCTestCase {
    typealias Harness = ConnectionHarness
    typealias Transitions = ConnectionTransitionTests

    static let clients = try! Harness.config("[clients.\"uid:1000\"]\nallow = [\"insecure.test\", \"bound-insecure.test\", \"tunnel.test\"]\n")
    static let alice = ClientIdentity.local(LocalClient(uid: 1000, user: "alice"))

    private func harness(_ listener: ListenerKind = .connect) -> Harness {
        let harness = Harness(config: Self.clients, listener: listener)
        harness.io.identity = .known(Self.alice)
        return harness
    }

    private func assertIdentified(_ record: ConnectionRecord, event: String, file: StaticString = #filePath, line: UInt = #line) {
        let made = record.line
        switch record.event {
        case .decision: XCTAssertEqual(event, "connection", file: file, line: line)
        case .tunnelClosed: XCTAssertEqual(event, "tunnel-closed", file: file, line: line)
        }
        let fields = Dictionary(made.fields.map { ($0.0.rawValue, $0.1) }, uniquingKeysWith: { $1 })
        XCTAssertEqual(fields["client_uid"], "1000", "\(made.fields)", file: file, line: line)
        XCTAssertEqual(fields["client_user"], "alice", "\(made.fields)", file: file, line: line)
        XCTAssertEqual(fields["client"], "127.0.0.1:40000", file: file, line: line)
        XCTAssertEqual(record.clientLabel, "uid:1000", file: file, line: line)
    }

    /// A sample of `pinproxy_connections_total` with these labels and value 1.
    private func counted(_ metrics: String, outcome: String, listener: String, client: String) -> Bool {
        metrics.split(separator: "\n").contains { line in
            line.hasPrefix("pinproxy_connections_total{") && line.hasSuffix(" 1") && line.contains("outcome=\"\(outcome)\"")
                && line.contains("listener=\"\(listener)\"") && line.contains("client=\"\(client)\"")
        }
    }

    /// The connection is cut while its tunnel is open: it recorded its decision and its tunnel's
    /// end, both carrying its client, to `upstream`, and was counted once as `outcome`.
    private func assertTunnelRecorded(_ harness: Harness, relaying state: String, outcome: String, listener: String, upstream: String? = nil,
                                      file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(harness.state, state, file: file, line: line)
        harness.connection.cut("stopping")
        let records = harness.io.records
        XCTAssertEqual(records.count, 2, file: file, line: line)
        guard records.count == 2 else { return }
        assertIdentified(records[0], event: "connection", file: file, line: line)
        assertIdentified(records[1], event: "tunnel-closed", file: file, line: line)
        if let upstream { XCTAssertEqual(records[1].upstream?.description, upstream, file: file, line: line) }
        // The recorder wrote both lines.
        XCTAssertEqual(harness.io.lines.filter { $0.contains("event=connection ") || $0.contains("event=tunnel-closed ") }.count, 2,
                       "\(harness.io.lines)", file: file, line: line)
        let metrics = harness.io.metrics.render()
        XCTAssertTrue(counted(metrics, outcome: outcome, listener: listener, client: "uid:1000"), metrics, file: file, line: line)
    }

    func testAnInterceptedConnectionRecordsItsDecisionAndItsTunnelsEnd() {
        let harness = harness()
        harness.connection.start()
        harness.plainClient.receive("CONNECT insecure.test:443 HTTP/1.1\r\n\r\n")
        harness.io.lookups.last?.done(.success([Transitions.someAddress]))
        harness.io.dials.last?.work.done(.success(20))
        harness.upstream?.fire(.connected)
        harness.io.hello = .unreadable
        harness.plainClient.receive("\u{16}")
        harness.client.fire(.connected)
        harness.timers.first { $0.interval == 0 }?.fire()
        assertTunnelRecorded(harness, relaying: "relaying", outcome: "allowed", listener: "connect", upstream: "198.51.100.7:443")
    }

    /// A CONNECT to tunnel.test (`mode = "tunnel"`) whose ClientHello has come, carrying
    /// `encrypted_client_hello` when `hidingItsName` (refused: the tunnel cannot be bound).
    private func tunnelModeConnection(hidingItsName: Bool) -> Harness {
        let harness = harness()
        harness.connection.start()
        harness.plainClient.receive("CONNECT tunnel.test:443 HTTP/1.1\r\n\r\n")
        harness.io.dials.last?.work.done(.success(20))
        harness.io.hello = .hello(ClientHello(alpn: nil, serverName: "tunnel.test", offersEncryptedClientHello: hidingItsName))
        harness.plainClient.receive("\u{16}")
        return harness
    }

    /// The pass-through `tunnel-closed` line carries the client's identity too, and the tunnel
    /// is counted under the client's section, not `client="none"`.
    func testATunnelModeConnectionCarriesItsClientLikeAnyOther() {
        let harness = tunnelModeConnection(hidingItsName: false)
        assertTunnelRecorded(harness, relaying: "passing-through", outcome: "tunnel", listener: "connect", upstream: "192.0.2.1:443")
    }

    func testATransparentConnectionRecordsItsClient() {
        let harness = harness(.transparent)
        harness.connection.startTransparent(Harness.notRedirected)
        harness.connection.identifyClient(.transparent(host: TargetHost("bound-insecure.test")!, original: SocketAddress(address: Transitions.someAddress, port: 443),
                                                       hello: Transitions.hello))
        harness.io.dials.last?.work.done(.success(20))
        harness.upstream?.fire(.connected)
        harness.client.fire(.connected)
        harness.timers.first { $0.interval == 0 }?.fire()
        assertTunnelRecorded(harness, relaying: "relaying", outcome: "allowed", listener: "transparent")
    }

    func testARefusedTunnelIsCountedUnderItsClient() {
        let harness = tunnelModeConnection(hidingItsName: true)
        let records = harness.io.records
        XCTAssertEqual(records.count, 1)
        records.first.map { assertIdentified($0, event: "connection") }
        let metrics = harness.io.metrics.render()
        XCTAssertTrue(counted(metrics, outcome: "refused", listener: "connect", client: "uid:1000"), metrics)
        XCTAssertTrue(metrics.contains("pinproxy_refusals_total{") && metrics.contains("client=\"uid:1000\""), metrics)
    }

    func testEveryCaptureLoopRefusalIsRecorded() {
        var lines = 0
        for _ in 0..<3 {
            let harness = Harness(config: Transitions.base, listener: .transparent)
            harness.connection.startTransparent(Harness.notRedirected)
            harness.io.hello = .hello(Transitions.hello)
            harness.plainClient.receive("\u{16}")
            lines += harness.io.records.filter { if case .decision(let decision) = $0.event { decision.reason == .captureLoop } else { false } }.count
            XCTAssertEqual(harness.io.lines.filter { $0.contains("reason=capture-loop") }.count, 1, "\(harness.io.lines)")
        }
        XCTAssertEqual(lines, 3)
    }
}
