import Foundation
import Logging
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
@testable import PinproxyProxy
import PinproxyService

/// A `ConnectionIO` without sockets, loop or TLS, as swift-nio's embedded channel: it records
/// what a connection asks for (timers, lookups, connects, endpoints, relays) and lets a test
/// fire the events, one at a time, on the test's thread. What the connection records goes
/// through a real `ConnectionRecorder` into `lines` and `metrics`: no daemon state, no CA.
final class EmbeddedIO: ConnectionIO {
    var now: TimeInterval = 1_000
    /// The time of day the verdict judges at: within the test PKI's validity.
    var wallClock = Date()
    private var madeTimers: [WeakTimer] = []
    private(set) var lookups: [EmbeddedWork<Result<[IPAddress], DNSFailure>>] = []
    private(set) var dials: [EmbeddedDial] = []
    private(set) var closedSockets: [Int32] = []
    /// Endpoints made for upstreams (plain or TLS), in order.
    private(set) var upstreams: [EmbeddedEndpoint] = []
    /// The TLS endpoints that replaced the client's, in order.
    private(set) var clientTLS: [EmbeddedEndpoint] = []
    private(set) var relays: [EmbeddedRelay] = []
    private(set) var identifications: [(IdentityLookups.Parts) -> Void] = []
    private(set) var customChecks: [(CustomCheckResult) -> Void] = []
    /// What the connection recorded (`ConnectionRecord`): its decision, its tunnel's end.
    private(set) var records: [ConnectionRecord] = []
    /// Every line written about the connection, its records' included, in logfmt.
    var lines: [String] { written.withLock { $0 } }
    private let written = Locked([String]())
    let metrics = ProxyMetrics(version: "test", commit: "test")
    private lazy var recorder = ConnectionRecorder(log: accessLog, metrics: metrics) { _, _, _, _ in }
    private lazy var accessLog = AccessLog(format: .logfmt) { [written] line in written.withLock { $0.append(line) } }
    let clientTunnels = ClientTunnels()
    let deliveredSCTs = BoundedCache<DeliveredBesideChain>()
    private(set) var forgottenSessions: [String] = []
    private(set) var tunnelsOpened = 0
    var ownUpstreams: OwnUpstreams? { nil }
    var transparentListeners: [SocketAddress] { [] }
    /// What `readHello` answers.
    var hello: ClientHelloProgress = .incomplete
    /// What `identify` answers.
    var identity: ClientIdentifier.Start = .known(.remote)
    /// What the upstreams present.
    var presentedChain: [Certificate] = []
    /// Whether `acceptTLS` fails (no leaf can be minted, say).
    var acceptTLSFails = false
    /// Whether the relay cannot take the TLS connections over.
    var relayFails = false

    func timer(after interval: TimeInterval, repeats: Bool, _ action: @escaping () -> Void) -> EmbeddedTimer {
        let timer = EmbeddedTimer(interval: interval, repeats: repeats, action: action)
        madeTimers.append(WeakTimer(timer: timer))
        return timer
    }

    /// The timers still held by someone and not cancelled: those of the current state.
    var liveTimers: [EmbeddedTimer] {
        madeTimers.compactMap(\.timer).filter { !$0.cancelled }
    }

    func resolve(_ name: String, _ done: @escaping (Result<[IPAddress], DNSFailure>) -> Void) -> EmbeddedWork<Result<[IPAddress], DNSFailure>> {
        let lookup = EmbeddedWork(name: name, done: done)
        lookups.append(lookup)
        return lookup
    }

    func connect(to address: SocketAddress, timeout: TimeInterval, _ done: @escaping (Result<Int32, TCPConnectFailure>) -> Void) -> EmbeddedDial {
        let dial = EmbeddedDial(address: address, timeout: timeout, work: EmbeddedWork(name: address.description, done: done))
        dials.append(dial)
        return dial
    }

    func closeSocket(_ socket: Int32) {
        closedSockets.append(socket)
    }

    func plain(socket: Int32) throws -> EmbeddedEndpoint {
        let endpoint = EmbeddedEndpoint(socket: socket)
        upstreams.append(endpoint)
        return endpoint
    }

    func connectTLS(socket: Int32, serverName: String?, minimumVersion: TLSProtocolVersion, requestOCSPStaple: Bool, requestSCTs: Bool, alpn: ALPNOffer,
                    clientIdentity: TLSClientIdentity?, sessionKey: String?) throws -> EmbeddedEndpoint {
        let endpoint = EmbeddedEndpoint(socket: socket)
        endpoint.offer = alpn
        endpoint.chain = presentedChain
        upstreams.append(endpoint)
        return endpoint
    }

    func acceptTLS(on client: EmbeddedEndpoint, for host: TargetHost, serverName: String?, applicationProtocols: [ALPNProtocol],
                   bufferLimit: Int) throws -> EmbeddedEndpoint {
        if acceptTLSFails { throw LocalCAError("no leaf in the embedded IO") }
        let endpoint = EmbeddedEndpoint(socket: client.socket)
        endpoint.underneath = client
        endpoint.acceptedProtocols = applicationProtocols
        clientTLS.append(endpoint)
        return endpoint
    }

    func helloReader() throws -> Void {}

    func readHello(_ reader: Void, from endpoint: EmbeddedEndpoint) -> ClientHelloProgress {
        hello
    }

    func relay(client: EmbeddedEndpoint, upstream: EmbeddedEndpoint, readLimit: Int) -> EmbeddedRelay? {
        if relayFails { return nil }
        let relay = EmbeddedRelay(client: client, upstream: upstream)
        relays.append(relay)
        return relay
    }

    func identify(peer: SocketAddress?, ourEnd: SocketAddress?, needsExecutable: Bool, deadline: TimeInterval,
                  done: @escaping (IdentityLookups.Parts) -> Void) -> ClientIdentifier.Start {
        identifications.append(done)
        return identity
    }

    func record(_ record: ConnectionRecord) {
        records.append(record)
        recorder.record(record)
    }

    func log(_ level: Logger.Level, _ event: String, _ fields: [(AccessLog.Field, String)]) {
        accessLog.emit(level, event, fields)
    }

    func tunnelOpened() {
        tunnelsOpened += 1
    }

    func forgetSession(_ key: String) {
        forgottenSessions.append(key)
    }

    func runCustomCheck(_ command: [String], entry: PolicyEntry, chain: [Certificate], host: TargetHost, port: UInt16,
                        client: ClientIdentity?, timeout: TimeInterval, cacheSeconds: TimeInterval,
                        done: @escaping (CustomCheckResult) -> Void) {
        customChecks.append(done)
    }
}

private struct WeakTimer {
    weak var timer: EmbeddedTimer?
}

/// A timer a test fires by hand.
final class EmbeddedTimer: ConnectionTimer {
    let interval: TimeInterval
    let repeats: Bool
    private var action: (() -> Void)?
    private(set) var cancelled = false

    init(interval: TimeInterval, repeats: Bool, action: @escaping () -> Void) {
        self.interval = interval
        self.repeats = repeats
        self.action = action
    }

    /// Runs its action, as the loop would (even after a cancel, to check that nothing then happens).
    func fire() {
        let action = self.action
        if !repeats { self.action = nil }
        action?()
    }

    func cancel() {
        cancelled = true
    }
}

/// A DNS lookup or connect a test completes by hand; `done` stays callable after a cancel, so
/// that a test can deliver a late answer.
final class EmbeddedWork<Answer>: PendingWork {
    let name: String
    let done: (Answer) -> Void
    private(set) var cancelled = false

    init(name: String, done: @escaping (Answer) -> Void) {
        self.name = name
        self.done = done
    }

    func cancel() {
        cancelled = true
    }
}

/// A TCP connect under way.
struct EmbeddedDial: PendingWork {
    let address: SocketAddress
    let timeout: TimeInterval
    let work: EmbeddedWork<Result<Int32, TCPConnectFailure>>

    func cancel() {
        work.cancel()
    }
}

/// A socket's buffers and callbacks: the test feeds `input` and fires events, and reads what
/// the connection wrote. Writes leave at once unless `holdsOutput`.
final class EmbeddedEndpoint: ConnectionEndpoint {
    let socket: Int32
    var onRead: (() -> Void)?
    var onWrite: (() -> Void)?
    var onEvent: ((EndpointEvents) -> Void)?
    var onRenegotiationAttempt: (() -> Void)?
    var onClientCertificateRequest: (() -> ClientCertificateAnswer)?
    var input: [UInt8] = []
    private(set) var written: [UInt8] = []
    var holdsOutput = false
    private(set) var held = 0
    private(set) var reading = false
    private(set) var closed = false
    private(set) var aborted = false
    private(set) var shutDown = false
    /// The plain endpoint a TLS one was accepted on.
    var underneath: EmbeddedEndpoint?
    /// What an upstream was offered, and what a client's TLS may select.
    var offer: ALPNOffer?
    var acceptedProtocols: [ALPNProtocol] = []
    var selectedProtocol: ALPNProtocol?
    var requestedServerName: String?
    var tlsFailure = TLSFailure(messages: ["embedded handshake failure"], isProtocolVersionMismatch: false)
    private(set) var sessionAdmitted = false

    init(socket: Int32) {
        self.socket = socket
    }

    var text: String { String(decoding: written, as: UTF8.self) }

    // Test side

    /// Bytes arrive from the peer.
    func receive(_ text: String) {
        input += Array(text.utf8)
        onRead?()
    }

    func fire(_ events: EndpointEvents) {
        onEvent?(events)
    }

    /// What was held in the output leaves.
    func flush() {
        held = 0
        onWrite?()
    }

    // Connection side

    var inputLength: Int { input.count }
    var outputLength: Int { held }
    func setReading(_ enabled: Bool) { reading = enabled }
    func setWriteLowWatermark(_ bytes: Int) {}

    func readLine(maxLength: Int) -> BufferedLine {
        guard let end = input.firstIndex(of: UInt8(ascii: "\n")) else { return input.count > maxLength ? .tooLong : .incomplete }
        var line = Array(input[..<end])
        if line.last == UInt8(ascii: "\r") { line.removeLast() }
        guard line.count <= maxLength else { return .tooLong }
        input.removeFirst(end + 1)
        guard let text = String(validating: line, as: UTF8.self), text.utf8.allSatisfy({ $0 >= 0x20 && $0 != 0x7F || $0 == 0x09 }) else {
            return .notText
        }
        return .line(text)
    }

    func read(maxLength: Int) -> [UInt8] {
        let bytes = Array(input.prefix(maxLength))
        input.removeFirst(bytes.count)
        return bytes
    }

    func write(_ bytes: [UInt8]) {
        written += bytes
        if holdsOutput { held += bytes.count }
    }

    func moveInput(to other: EmbeddedEndpoint) -> Int {
        let count = input.count
        other.write(input)
        input = []
        return count
    }

    func discardInput() { input = [] }
    func shutdownWrite() { shutDown = true }
    func close() { closed = true }
    func abort() { aborted = true }

    var chain: [Certificate] = []
    var peerCertificateChain: [Certificate] { chain }
    var ocspStaple: [UInt8]? { nil }
    var tlsExtensionSCTs: [[UInt8]] { [] }
    var sessionReused: Bool { false }
    var clientCertificateRequested: Bool { false }
    func takeTLSErrors() -> TLSFailure { tlsFailure }
    func admitSession() { sessionAdmitted = true }
    func takeSessionTickets() {}
}

/// The relay of an intercepted tunnel: the test fires its events.
final class EmbeddedRelay: TunnelRelay {
    let client: EmbeddedEndpoint
    let upstream: EmbeddedEndpoint
    var onEvent: ((TLSRelay.Event) -> Void)?
    private(set) var started = false
    private(set) var closed = false
    private(set) var shutDown: [TLSRelay.Direction] = []

    init(client: EmbeddedEndpoint, upstream: EmbeddedEndpoint) {
        self.client = client
        self.upstream = upstream
    }

    func start() { started = true }
    func shutdownWrite(_ direction: TLSRelay.Direction) { shutDown.append(direction) }
    func close() { closed = true }
}
