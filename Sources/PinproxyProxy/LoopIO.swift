import FoundationEssentials
import Logging
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import PinproxyService
import Synchronization

/// The daemon's `ConnectionIO`: a worker's libevent loop, its resolver and client identifier,
/// and the shared TLS contexts, local CA and session cache.
struct LoopIO: ConnectionIO {
    let loop: EventLoop
    let resolver: DNSResolver
    let identifier: ClientIdentifier
    let shared: SharedState

    var now: TimeInterval { loop.now }

    var wallClock: Date { Date() }

    func timer(after interval: TimeInterval, repeats: Bool, _ action: @escaping () -> Void) -> PinproxyInterop.Timer {
        PinproxyInterop.Timer(loop: loop, after: interval, repeats: repeats, action)
    }

    func resolve(_ name: String, _ done: @escaping (Result<[IPAddress], DNSFailure>) -> Void) -> DNSRequest {
        resolver.resolve(name, completion: done)
    }

    func connect(to address: SocketAddress, timeout: TimeInterval, _ done: @escaping (Result<Int32, TCPConnectFailure>) -> Void) -> TCPConnector {
        TCPConnector(loop: loop, address: address, timeout: timeout, completion: done)
    }

    func closeSocket(_ socket: Int32) {
        PinproxyInterop.closeSocket(socket)
    }

    func plain(socket: Int32) throws -> BufferEvent {
        try BufferEvent(loop: loop, socket: socket)
    }

    func connectTLS(socket: Int32, serverName: String?, minimumVersion: TLSProtocolVersion, requestOCSPStaple: Bool, requestSCTs: Bool, alpn: ALPNOffer,
                    clientIdentity: TLSClientIdentity?, sessionKey: String?) throws -> BufferEvent {
        try BufferEvent.connectTLS(loop: loop, socket: socket, context: shared.upstreamTLS, serverName: serverName, minimumVersion: minimumVersion,
                                   requestOCSPStaple: requestOCSPStaple, requestSCTs: requestSCTs, alpn: alpn, clientIdentity: clientIdentity,
                                   sessions: sessionKey == nil ? nil : shared.sessions, sessionKey: sessionKey)
    }

    func acceptTLS(on client: BufferEvent, for host: TargetHost, serverName: String?, applicationProtocols: [ALPNProtocol],
                   bufferLimit: Int) throws -> BufferEvent {
        let leaf = try shared.leaf(for: host)
        return try client.acceptTLS(loop: loop, context: shared.interceptTLS, certificate: leaf.certificate, key: leaf.key,
                                    serverName: serverName, applicationProtocols: applicationProtocols, bufferLimit: bufferLimit)
    }

    func helloReader() throws -> ClientHelloReader {
        try ClientHelloReader()
    }

    func readHello(_ reader: ClientHelloReader, from endpoint: BufferEvent) -> ClientHelloProgress {
        reader.read(from: endpoint)
    }

    func relay(client: BufferEvent, upstream: BufferEvent, readLimit: Int) -> TLSRelay? {
        guard let clientEnd = client.takeTLSEndpoint(), let upstreamEnd = upstream.takeTLSEndpoint() else { return nil }
        return TLSRelay(loop: loop, client: clientEnd, upstream: upstreamEnd, readLimit: readLimit)
    }

    func identify(peer: SocketAddress?, ourEnd: SocketAddress?, needsExecutable: Bool, deadline: TimeInterval,
                  done: @escaping (IdentityLookups.Parts) -> Void) -> ClientIdentifier.Start {
        identifier.start(peer: peer, ourEnd: ourEnd, needsExecutable: needsExecutable, deadline: deadline, on: loop,
                         metrics: shared.metrics, done: done)
    }

    func record(_ record: ConnectionRecord) {
        shared.recorder.record(record)
        if case .tunnelClosed = record.event { shared.openTunnels.subtract(1, ordering: .relaxed) }
    }

    func log(_ level: Logger.Level, _ event: String, _ fields: [(AccessLog.Field, String)]) {
        shared.log.emit(level, event, fields)
    }

    var metrics: ProxyMetrics { shared.metrics }

    func tunnelOpened() {
        shared.tunnelOpened()
    }

    var clientTunnels: ClientTunnels { shared.clientTunnels }

    func forgetSession(_ key: String) {
        shared.sessions.remove(key)
    }

    var deliveredSCTs: BoundedCache<DeliveredBesideChain> { shared.deliveredSCTs }

    var ownUpstreams: OwnUpstreams? { shared.ownUpstreams }

    var transparentListeners: [SocketAddress] { shared.transparentListeners }

    func runCustomCheck(_ command: [String], entry: PolicyEntry, chain: [Certificate], host: TargetHost, port: UInt16,
                        client: ClientIdentity?, timeout: TimeInterval, cacheSeconds: TimeInterval,
                        done: @escaping (CustomCheckResult) -> Void) {
        shared.customChecks.check(command, entry: entry, chain: chain, host: host, port: port, client: client, timeout: timeout,
                                  cacheSeconds: cacheSeconds, on: loop, done: done)
    }
}

extension BufferEvent: ConnectionEndpoint {}
extension PinproxyInterop.Timer: ConnectionTimer {}
extension DNSRequest: PendingWork {}
extension TCPConnector: PendingWork {}
extension TLSRelay: TunnelRelay {}
