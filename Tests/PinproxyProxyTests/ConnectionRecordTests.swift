import Foundation
import PinproxyCore
import XCTest
@testable import PinproxyInterop
import PinproxyPolicy
import PinproxyService
@testable import PinproxyProxy

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

    /// The decision and the tunnel's end of a connection, through a fresh recorder.
    private func recorded(_ harness: Harness, file: StaticString = #filePath, line: UInt = #line) -> (records: [ConnectionRecord], metrics: String) {
        let metrics = ProxyMetrics(version: "test", commit: "test")
        let recorder = ConnectionRecorder(log: AccessLog(format: .logfmt), metrics: metrics) { _, _, _, _ in }
        for record in harness.io.records { recorder.record(record) }
        return (harness.io.records, metrics.render())
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
        XCTAssertEqual(harness.state, "relaying")
        harness.connection.cut("stopping")
        let (records, metrics) = recorded(harness)
        XCTAssertEqual(records.count, 2)
        assertIdentified(records[0], event: "connection")
        assertIdentified(records[1], event: "tunnel-closed")
        XCTAssertEqual(records[0].upstream?.description, "198.51.100.7:443")
        XCTAssertTrue(counted(metrics, outcome: "allowed", listener: "connect", client: "uid:1000"), metrics)
    }

    func testATunnelModeConnectionCarriesItsClientLikeAnyOther() {
        let harness = harness()
        harness.connection.start()
        harness.plainClient.receive("CONNECT tunnel.test:443 HTTP/1.1\r\n\r\n")
        harness.io.dials.last?.work.done(.success(20))
        harness.io.hello = .hello(ClientHello(alpn: nil, serverName: "tunnel.test", offersEncryptedClientHello: false))
        harness.plainClient.receive("\u{16}")
        XCTAssertEqual(harness.state, "passing-through")
        harness.connection.cut("stopping")
        let (records, metrics) = recorded(harness)
        XCTAssertEqual(records.count, 2)
        assertIdentified(records[0], event: "connection")
        // The pass-through tunnel-closed line carries the client's identity too.
        assertIdentified(records[1], event: "tunnel-closed")
        XCTAssertEqual(records[1].upstream?.description, "192.0.2.1:443")
        // Counted under the client's section, not client="none".
        XCTAssertTrue(counted(metrics, outcome: "tunnel", listener: "connect", client: "uid:1000"), metrics)
    }

    func testATransparentConnectionRecordsItsClient() {
        let harness = harness(.transparent)
        harness.connection.startTransparent(ConnectionAddresses(socket: -1))
        harness.connection.identifyClient(.transparent(host: TargetHost("bound-insecure.test")!, original: SocketAddress(address: Transitions.someAddress, port: 443),
                                                       hello: Transitions.hello))
        harness.io.dials.last?.work.done(.success(20))
        harness.upstream?.fire(.connected)
        harness.client.fire(.connected)
        harness.timers.first { $0.interval == 0 }?.fire()
        XCTAssertEqual(harness.state, "relaying")
        harness.connection.cut("stopping")
        let (records, metrics) = recorded(harness)
        XCTAssertEqual(records.count, 2)
        assertIdentified(records[0], event: "connection")
        assertIdentified(records[1], event: "tunnel-closed")
        XCTAssertTrue(counted(metrics, outcome: "allowed", listener: "transparent", client: "uid:1000"), metrics)
    }

    func testARefusedTunnelIsCountedUnderItsClient() {
        let harness = harness()
        harness.connection.start()
        harness.plainClient.receive("CONNECT tunnel.test:443 HTTP/1.1\r\n\r\n")
        harness.io.dials.last?.work.done(.success(20))
        harness.io.hello = .hello(ClientHello(alpn: nil, serverName: "tunnel.test", offersEncryptedClientHello: true))
        harness.plainClient.receive("\u{16}")
        let (records, metrics) = recorded(harness)
        XCTAssertEqual(records.count, 1)
        assertIdentified(records[0], event: "connection")
        XCTAssertTrue(counted(metrics, outcome: "refused", listener: "connect", client: "uid:1000"), metrics)
        XCTAssertTrue(metrics.contains("pinproxy_refusals_total{") && metrics.contains("client=\"uid:1000\""), metrics)
    }

    func testEveryCaptureLoopRefusalIsRecorded() {
        var lines = 0
        for _ in 0..<3 {
            let harness = Harness(config: Transitions.base, listener: .transparent)
            harness.connection.startTransparent(ConnectionAddresses(socket: -1))
            harness.io.hello = .hello(Transitions.hello)
            harness.plainClient.receive("\u{16}")
            let (records, _) = recorded(harness)
            lines += records.filter { if case .decision(let decision) = $0.event { decision.reason == .captureLoop } else { false } }.count
        }
        XCTAssertEqual(lines, 3)
    }
}
