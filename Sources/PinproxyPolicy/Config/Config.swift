import FoundationEssentials
import PinproxyCore
import PinproxyInterop

/// A loaded, fully checked pinproxy configuration. Immutable: the daemon shares one snapshot
/// read-only across its event loops and swaps it whole on reload.
public struct Config: Sendable {
    /// The file it was read from (`<embedded>` for the built-in default).
    public let path: String
    public let proxy: ProxySettings
    /// `[resolve]`: names that bypass DNS.
    public let resolve: [String: [IPAddress]]
    /// `[capture]`: what `pinproxy egress` redirects to the transparent listener.
    public let capture: CaptureSettings
    public let policies: PolicyTable
    /// What the verdict reads besides an entry of `policies`: hand it in with the entry.
    public let verdictContext: VerdictContext
    /// `[clients."SELECTOR"]`: who may reach which hosts.
    public let clients: ClientRules
    /// Warnings found at load time (the config is usable).
    public let warnings: [Diagnostic]
    /// Where the keys that `check` judges against this host are written.
    public internal(set) var lines = KeyLines()

    /// Lines of keys in the config file (0 where the key is not written).
    public struct KeyLines: Sendable {
        public var transparentListen = 0
        /// `capture.exempt_users`, else the `[capture]` header, else `transparent_listen`.
        public var exemptUsers = 0
    }
}

/// An address to listen on: an IP literal and a port.
public struct ListenAddress: Sendable, Hashable, CustomStringConvertible {
    public let address: IPAddress
    public let port: UInt16

    /// Parses `127.0.0.1:3128` or `[::1]:3128`.
    public init?(_ text: String) {
        guard let colon = text.lastIndex(of: ":"),
              let port = UInt16(text[text.index(after: colon)...]), port > 0 else { return nil }
        let host = String(text[..<colon])
        if host.contains(":") && !(host.hasPrefix("[") && host.hasSuffix("]")) { return nil }
        guard let address = IPAddress(host) else { return nil }
        self.address = address
        self.port = port
    }

    public var description: String { "\(address.hostLiteral):\(port)" }
}

/// `[proxy]`: how the daemon listens, where it keeps its CA, its limits and timeouts.
public struct ProxySettings: Sendable {
    /// The log line format.
    public enum LogFormat: String, Sendable, CaseIterable {
        case logfmt, json
    }

    /// How a refusal reaches the client.
    public enum RefusalDelivery: String, Sendable, CaseIterable {
        /// The CONNECT answer: an HTTP error status with a `Pinproxy-Refusal` header.
        case connect
        /// 200 to the CONNECT, the client's TLS completed with a minted leaf, then an HTTP
        /// error response inside it that explains the refusal; for clients that print only a
        /// CONNECT status. No byte goes to or comes from the refused upstream.
        case inTLS = "in-tls"
    }

    @Declared(.proxy, "listen") public var listen: [ListenAddress]
    /// Where connections redirected by the egress lock arrive (no CONNECT: the host comes
    /// from the ClientHello, the address and port from the original destination).
    @Declared(.proxy, "transparent_listen") public var transparentListen: [ListenAddress]
    /// Where the local CA lives; nil means the platform default (see `LocalCA`).
    @Declared(.proxy, "ca_dir") public var caDirectory: String?
    @Declared(.proxy, "allow_ports") public var allowPorts: Set<UInt16>
    @Declared(.proxy, "block_private_destinations") public var blockPrivateDestinations: Bool
    @Declared(.proxy, "metrics_listen") public var metricsListen: ListenAddress?
    @Declared(.proxy, "log_format") public var logFormat: LogFormat
    @Declared(.proxy, "refusal") public var refusal: RefusalDelivery
    /// Where `pinproxy run` writes its process id (for `pinproxy reload`); nil: nowhere.
    @Declared(.proxy, "pid_file") public var pidFile: String?
    /// `report_to`: where pin-failure reports go (RFC 7469 JSON).
    @Declared(.proxy, "report_to") public var reportTo: [ReportDestination]
    /// `report_rate_limit`: reports a minute for the whole daemon, on top of 10 a minute per host.
    @Declared(.proxy, "report_rate_limit") public var reportRateLimit: Int
    /// `report_file_max_bytes`: a `file:` destination is not written past this size; reports
    /// are dropped until the file is reopened.
    @Declared(.proxy, "report_file_max_bytes") public var reportFileMaxBytes: Int
    /// A `verify_command` that has not answered within this is killed, and the connection refused.
    @Declared(.proxy, "verify_command_timeout") public var verifyCommandTimeout: TimeInterval
    /// How long a `verify_command` answer is reused for the same chain, host, port and command.
    @Declared(.proxy, "verify_command_cache") public var verifyCommandCache: TimeInterval
    /// `verify_command`s running at once, at most.
    @Declared(.proxy, "verify_command_concurrency") public var verifyCommandConcurrency: Int
    /// Event loops (threads); nil means one per core.
    @Declared(.proxy, "workers") public var workers: Int?
    /// Whole CONNECT request, from accept to the end of its headers.
    @Declared(.proxy, "request_timeout") public var requestTimeout: TimeInterval
    /// DNS resolution of one destination.
    @Declared(.proxy, "dns_timeout") public var dnsTimeout: TimeInterval
    /// TCP connect to one upstream address.
    @Declared(.proxy, "connect_timeout") public var connectTimeout: TimeInterval
    /// Each TLS handshake (upstream, then with the client).
    @Declared(.proxy, "handshake_timeout") public var handshakeTimeout: TimeInterval
    /// A tunnel with no traffic either way for this long is closed.
    @Declared(.proxy, "idle_timeout") public var idleTimeout: TimeInterval
    /// On SIGTERM, how long open tunnels may go on before they are cut.
    @Declared(.proxy, "drain_timeout") public var drainTimeout: TimeInterval
    /// Each `metrics_listen` request in total, from accept (or the previous answer on the
    /// connection) to its answer, however slowly the client sends it.
    @Declared(.proxy, "admin_timeout") public var adminTimeout: TimeInterval
    /// Open client connections at most; further ones are closed at accept. nil: as many as
    /// the open-file limit allows (two descriptors per tunnel).
    @Declared(.proxy, "max_connections") public var maxConnections: Int?
    /// Tunnels one client holds at most (`client-limit` beyond): a local client is its uid, a
    /// remote or forwarded one its address, and unknown clients share one count; nil: unlimited.
    @Declared(.proxy, "max_tunnels_per_client") public var maxTunnelsPerClient: Int?
    /// How long a connection waits for what is looked up off the loop about its client (the
    /// user's name, the cgroup's unit, the program); a unit not found by then makes it unknown.
    @Declared(.proxy, "client_identity_timeout") public var clientIdentityTimeout: TimeInterval
    /// Whether pin-failure reports carry the client's identity (user names and paths would
    /// go to the collector).
    @Declared(.proxy, "report_client_identity") public var reportClientIdentity: Bool
    /// `ct_log_list`: the CT log list file (resolved against the config's directory).
    @Declared(.proxy, "ct_log_list") public var ctLogList: String?
    /// Bytes buffered per direction of a tunnel before reading pauses (backpressure). The relay
    /// holds at most one TLS record's plaintext (16 KiB) per direction, or this if smaller; it
    /// also bounds what is queued for a client during its handshake or an in-TLS refusal.
    @Declared(.proxy, "relay_buffer_bytes") public var relayBufferBytes: Int

    public init() {}
}

/// `[capture]`: the egress lock's ruleset (`pinproxy egress`), which redirects the host's
/// outgoing TCP to these ports to the transparent listener.
public struct CaptureSettings: Sendable, Equatable {
    /// Destination ports redirected (TCP) and, with `blockQUIC`, rejected (UDP).
    @Declared(.capture, "ports") public var ports: [UInt16]
    /// Whether destinations that are this host's own addresses are captured too.
    @Declared(.capture, "local") public var local: Bool
    /// Whether outgoing UDP to `ports` is rejected, so that HTTP/3 clients fall back to TCP.
    @Declared(.capture, "block_quic") public var blockQUIC: Bool
    /// Users whose processes go out uncaptured: pinproxy's own user, at least.
    @Declared(.capture, "exempt_users") public var exemptUsers: [String]
    /// Interfaces whose forwarded traffic is captured too (containers' bridges): exact names,
    /// or a prefix and a trailing `*`.
    @Declared(.capture, "forward_interfaces") public var forwardInterfaces: [String]
    /// Whether the config has a `[capture]` table (the defaults apply otherwise).
    public var isWritten = false

    public init() {}
}
