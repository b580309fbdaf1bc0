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

    public var listen: [ListenAddress] = declared(.proxy, "listen")
    /// Where connections redirected by the egress lock arrive (no CONNECT: the host comes
    /// from the ClientHello, the address and port from the original destination).
    public var transparentListen: [ListenAddress] = declared(.proxy, "transparent_listen")
    /// Where the local CA lives; nil means the platform default (see `LocalCA`).
    public var caDirectory: String? = declared(.proxy, "ca_dir")
    public var allowPorts: Set<UInt16> = declared(.proxy, "allow_ports")
    public var blockPrivateDestinations: Bool = declared(.proxy, "block_private_destinations")
    public var metricsListen: ListenAddress? = declared(.proxy, "metrics_listen")
    public var logFormat: LogFormat = declared(.proxy, "log_format")
    public var refusal: RefusalDelivery = declared(.proxy, "refusal")
    /// Where `pinproxy run` writes its process id (for `pinproxy reload`); nil: nowhere.
    public var pidFile: String? = declared(.proxy, "pid_file")
    /// `report_to`: where pin-failure reports go (RFC 7469 JSON).
    public var reportTo: [ReportDestination] = declared(.proxy, "report_to")
    /// `report_rate_limit`: reports a minute for the whole daemon, on top of 10 a minute per host.
    public var reportRateLimit: Int = declared(.proxy, "report_rate_limit")
    /// `report_file_max_bytes`: a `file:` destination is not written past this size; reports
    /// are dropped until the file is reopened.
    public var reportFileMaxBytes: Int = declared(.proxy, "report_file_max_bytes")
    /// A `verify_command` that has not answered within this is killed, and the connection refused.
    public var verifyCommandTimeout: TimeInterval = declared(.proxy, "verify_command_timeout")
    /// How long a `verify_command` answer is reused for the same chain, host, port and command.
    public var verifyCommandCache: TimeInterval = declared(.proxy, "verify_command_cache")
    /// `verify_command`s running at once, at most.
    public var verifyCommandConcurrency: Int = declared(.proxy, "verify_command_concurrency")
    /// Event loops (threads); nil means one per core.
    public var workers: Int? = declared(.proxy, "workers")
    /// Whole CONNECT request, from accept to the end of its headers.
    public var requestTimeout: TimeInterval = declared(.proxy, "request_timeout")
    /// DNS resolution of one destination.
    public var dnsTimeout: TimeInterval = declared(.proxy, "dns_timeout")
    /// TCP connect to one upstream address.
    public var connectTimeout: TimeInterval = declared(.proxy, "connect_timeout")
    /// Each TLS handshake (upstream, then with the client).
    public var handshakeTimeout: TimeInterval = declared(.proxy, "handshake_timeout")
    /// A tunnel with no traffic either way for this long is closed.
    public var idleTimeout: TimeInterval = declared(.proxy, "idle_timeout")
    /// On SIGTERM, how long open tunnels may go on before they are cut.
    public var drainTimeout: TimeInterval = declared(.proxy, "drain_timeout")
    /// Each `metrics_listen` request in total, from accept (or the previous answer on the
    /// connection) to its answer, however slowly the client sends it.
    public var adminTimeout: TimeInterval = declared(.proxy, "admin_timeout")
    /// Open client connections at most; further ones are closed at accept. nil: as many as
    /// the open-file limit allows (two descriptors per tunnel).
    public var maxConnections: Int? = declared(.proxy, "max_connections")
    /// Tunnels one client holds at most (`client-limit` beyond): a local client is its uid, a
    /// remote or forwarded one its address, and unknown clients share one count; nil: unlimited.
    public var maxTunnelsPerClient: Int? = declared(.proxy, "max_tunnels_per_client")
    /// How long a connection waits for what is looked up off the loop about its client (the
    /// user's name, the cgroup's unit, the program); a unit not found by then makes it unknown.
    public var clientIdentityTimeout: TimeInterval = declared(.proxy, "client_identity_timeout")
    /// Whether pin-failure reports carry the client's identity (user names and paths would
    /// go to the collector).
    public var reportClientIdentity: Bool = declared(.proxy, "report_client_identity")
    /// `ct_log_list`: the CT log list file (resolved against the config's directory).
    public var ctLogList: String? = declared(.proxy, "ct_log_list")
    /// Bytes buffered per direction of a tunnel before reading pauses (backpressure). The relay
    /// holds at most one TLS record's plaintext (16 KiB) per direction, or this if smaller; it
    /// also bounds what is queued for a client during its handshake or an in-TLS refusal.
    public var relayBufferBytes: Int = declared(.proxy, "relay_buffer_bytes")

    public init() {}
}

/// `[capture]`: the egress lock's ruleset (`pinproxy egress`), which redirects the host's
/// outgoing TCP to these ports to the transparent listener.
public struct CaptureSettings: Sendable, Equatable {
    /// Destination ports redirected (TCP) and, with `blockQUIC`, rejected (UDP).
    public var ports: [UInt16] = declared(.capture, "ports")
    /// Whether destinations that are this host's own addresses are captured too.
    public var local: Bool = declared(.capture, "local")
    /// Whether outgoing UDP to `ports` is rejected, so that HTTP/3 clients fall back to TCP.
    public var blockQUIC: Bool = declared(.capture, "block_quic")
    /// Users whose processes go out uncaptured: pinproxy's own user, at least.
    public var exemptUsers: [String] = declared(.capture, "exempt_users")
    /// Interfaces whose forwarded traffic is captured too (containers' bridges): exact names,
    /// or a prefix and a trailing `*`.
    public var forwardInterfaces: [String] = declared(.capture, "forward_interfaces")
    /// Whether the config has a `[capture]` table (the defaults apply otherwise).
    public var isWritten = false

    public init() {}
}
