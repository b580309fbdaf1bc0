import FoundationEssentials
import Logging
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import PinproxyService

/// Everything a `ClientConnection` (and its `InTLSRefusal`) does outside itself: its sockets,
/// timers, the clock, DNS, connects, TLS, the relay and the work done off the loop. The daemon
/// uses `LoopIO` (libevent, OpenSSL); the unit tests use an embedded one that records what the
/// connection did and lets a test fire events, so that every transition can be checked without
/// a socket. The connection is generic over it, so the daemon's code is specialised: no
/// existential call on any path, the relay's included.
protocol ConnectionIO {
    associatedtype Endpoint: ConnectionEndpoint
    associatedtype Timer: ConnectionTimer
    /// A DNS lookup under way.
    associatedtype Lookup: PendingWork
    /// A TCP connect under way.
    associatedtype Dial: PendingWork
    /// Reads a client's ClientHello, leaving it buffered.
    associatedtype HelloReader
    /// Moves bytes both ways between two TLS connections once both handshakes are done.
    associatedtype Relay: TunnelRelay

    /// Monotonic seconds: the connection's timers, deadlines and durations.
    var now: TimeInterval { get }
    /// The time of day the verdict judges certificates at.
    var wallClock: Date { get }
    /// Calls `action` after `interval` (every `interval` when `repeats`) until the timer is
    /// cancelled or released.
    func timer(after interval: TimeInterval, repeats: Bool, _ action: @escaping () -> Void) -> Timer
    func resolve(_ name: String, _ done: @escaping (Result<[IPAddress], DNSFailure>) -> Void) -> Lookup
    /// A TCP connect to `address` within `timeout`; `done` gets the connected socket.
    func connect(to address: SocketAddress, timeout: TimeInterval, _ done: @escaping (Result<Int32, TCPConnectFailure>) -> Void) -> Dial
    /// Closes a connected socket nothing took over.
    func closeSocket(_ socket: Int32)
    /// A plain connection on a connected socket, which it owns from then on (closed when this throws).
    func plain(socket: Int32) throws -> Endpoint
    /// Starts the upstream TLS handshake on a connected socket, which the endpoint owns from
    /// then on; `sessionKey` offers and later caches a session under that key. `requestSCTs`
    /// asks for SCTs in the TLS extension and a staple.
    func connectTLS(socket: Int32, serverName: String?, minimumVersion: TLSProtocolVersion, requestOCSPStaple: Bool, requestSCTs: Bool, alpn: ALPNOffer,
                    clientIdentity: TLSClientIdentity?, sessionKey: String?) throws -> Endpoint
    /// Starts the client's TLS handshake on `client` with a leaf minted for `host`; the returned
    /// endpoint replaces `client`.
    func acceptTLS(on client: Endpoint, for host: TargetHost, serverName: String?, applicationProtocols: [ALPNProtocol],
                   bufferLimit: Int) throws -> Endpoint
    func helloReader() throws -> HelloReader
    /// Feeds `reader` what `endpoint` received since the last call, without consuming it.
    func readHello(_ reader: HelloReader, from endpoint: Endpoint) -> ClientHelloProgress
    /// Takes both TLS connections out of their endpoints for the relay; nil when one cannot be taken.
    func relay(client: Endpoint, upstream: Endpoint, readLimit: Int) -> Relay?
    /// Starts identifying the client (`ClientIdentifier.start`).
    func identify(peer: SocketAddress?, ourEnd: SocketAddress?, needsExecutable: Bool, deadline: TimeInterval,
                  done: @escaping (IdentityLookups.Parts) -> Void) -> ClientIdentifier.Start
    /// Writes what happened to the connection: its decision line, its `tunnel-closed` line, the
    /// metrics and the report (`ConnectionRecorder`).
    func record(_ record: ConnectionRecord)
    /// Writes a line about the connection that is not its record (a timeout, a client's failed
    /// handshake, an event in the wrong state).
    func log(_ level: Logger.Level, _ event: String, _ fields: [(AccessLog.Field, String)])
    /// The counters the steps feed besides the record: latencies, SCTs, relayed bytes.
    var metrics: ProxyMetrics { get }
    /// A tunnel has opened (it is counted until its `tunnelClosed` record).
    func tunnelOpened()
    /// The tunnels each client holds, counted when a rule reads them (`Admission.countsClientTunnels`).
    var clientTunnels: ClientTunnels { get }
    /// Forgets the upstream session cached under `key` (its resumption failed the verdict).
    func forgetSession(_ key: String)
    /// What each full upstream handshake delivered beside the chain (for `ct`), under its session's key.
    var deliveredSCTs: BoundedCache<DeliveredBesideChain> { get }
    /// The daemon's own upstream sockets, while a transparent listener is on (capture loops).
    var ownUpstreams: OwnUpstreams? { get }
    /// The transparent listeners' addresses.
    var transparentListeners: [SocketAddress] { get }
    /// Runs an entry's `verify_command` off the loop (`CustomChecks.check`); `done` is called on the loop.
    func runCustomCheck(_ command: [String], entry: PolicyEntry, chain: [Certificate], host: TargetHost, port: UInt16,
                        client: ClientIdentity?, timeout: TimeInterval, cacheSeconds: TimeInterval,
                        done: @escaping (CustomCheckResult) -> Void)
}

/// A connection's socket, plain or TLS, with its input and output buffers and its callbacks
/// on the loop (`BufferEvent`).
protocol ConnectionEndpoint: AnyObject {
    var onRead: (() -> Void)? { get set }
    var onWrite: (() -> Void)? { get set }
    var onEvent: ((EndpointEvents) -> Void)? { get set }
    var onRenegotiationAttempt: (() -> Void)? { get set }
    /// Asked, during an upstream handshake, when the server asks for the client certificate.
    var onClientCertificateRequest: (() -> ClientCertificateAnswer)? { get set }
    var inputLength: Int { get }
    var outputLength: Int { get }
    func setReading(_ enabled: Bool)
    func setWriteLowWatermark(_ bytes: Int)
    func readLine(maxLength: Int) -> BufferedLine
    func read(maxLength: Int) -> [UInt8]
    func write(_ bytes: [UInt8])
    /// Moves the whole input to `other`'s output; returns how many bytes moved.
    func moveInput(to other: Self) -> Int
    func discardInput()
    func shutdownWrite()
    /// Sends what is buffered, then closes (a TLS connection with its close_notify).
    func close()
    /// Closes at once, dropping what is buffered.
    func abort()

    // TLS
    var selectedProtocol: ALPNProtocol? { get }
    var requestedServerName: String? { get }
    var peerCertificateChain: [Certificate] { get }
    var ocspStaple: [UInt8]? { get }
    var tlsExtensionSCTs: [[UInt8]] { get }
    var sessionReused: Bool { get }
    var clientCertificateRequested: Bool { get }
    func takeTLSErrors() -> TLSFailure
    /// The upstream passed the verdict: its session may be cached.
    func admitSession()
    /// Reads the session tickets a closing upstream still has, for its reopening.
    func takeSessionTickets()
}

/// A timer a state holds: cancelled when released or by `cancel`.
protocol ConnectionTimer: AnyObject {
    func cancel()
}

/// Work under way outside the connection (a DNS lookup, a connect) that leaving a state stops.
protocol PendingWork {
    func cancel()
}

/// The relay of an intercepted tunnel (`TLSRelay`).
protocol TunnelRelay: AnyObject {
    var onEvent: ((TLSRelay.Event) -> Void)? { get set }
    func start()
    func shutdownWrite(_ direction: TLSRelay.Direction)
    func close()
}
