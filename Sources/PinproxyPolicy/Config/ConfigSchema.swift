import FoundationEssentials
import PinproxyInterop
import TOMLKit

/// Every config key, declared once: the decoder reads tables through these, `check`'s
/// unknown-key hints and a reload's restart-only warning come from them, and a test holds
/// `config/pinproxy.toml` and the key tables of `docs/configuration.md` to them. The order of
/// each list is the order hints and the warning name keys in.
enum ConfigSchema {
    /// The top-level tables (`[resolve]`'s keys are host names, `[hosts]`'s patterns and
    /// `[clients]`'s selectors: they are not declared).
    static let tables = ["proxy", "resolve", "capture", "default", "hosts", "clients"]

    static let proxy = ConfigKeys<ProxySettings>([
        .init("listen", .proxy, .strings, \.listen, default: [ListenAddress("127.0.0.1:3128")!], values: "list of IP:PORT",
              doc: #"addresses to accept CONNECT on (IP literal and port; IPv6 as `"[::1]:3128"`); not bound when systemd passes sockets"#) {
            $0.listenAddresses($1, $2, allowEmpty: false)
        }.restartOnly(\.listen),
        .init("transparent_listen", .proxy, .strings, \.transparentListen, default: [], shown: .unset("none"), values: "list of IP:PORT",
              example: #"["127.0.0.1:8", "[::1]:8"]"#,
              doc: "the egress lock's listener ([deployment.md](deployment.md#enforce-for-every-process)): one 127.0.0.1 and one [::1] address (the [::1] one may be left out where IPv6 is off), on a privileged port so that no other user can take it; under systemd `pinproxy-transparent.socket` binds it, else pinproxy needs `CAP_NET_BIND_SERVICE`; with `forward_interfaces`, 0.0.0.0:8 and [::]:8") {
            $0.listenAddresses($1, $2, allowEmpty: true)
        }.restartOnly(\.transparentListen),
        .nonEmptyString("ca_dir", .proxy, \.caDirectory,
                        unset: "`$STATE_DIRECTORY`, else `/var/lib/pinproxy` (root), else `$XDG_STATE_HOME/pinproxy` or `~/.local/state/pinproxy`",
                        example: #""/var/lib/pinproxy""#,
                        doc: "where the local CA is created and kept (key 0600, directory 0700); `scripts/run` sets `$STATE_DIRECTORY` to `.build/run-state`").restartOnly(\.caDirectory),
        .ports("allow_ports", .proxy, \.allowPorts, default: [443], doc: "destination ports a CONNECT may name (an entry's `ports` overrides it)"),
        .bool("block_private_destinations", .proxy, \.blockPrivateDestinations, default: true,
              doc: "refuse destinations that resolve to special-purpose addresses (`destination-denied`; see [how-it-works.md](how-it-works.md#the-data-flow))"),
        .integer("workers", .proxy, \.workers, in: 1...256, unset: "one per core", example: "2", doc: "event loops").restartOnly(\.workers),
        .choice("log_format", .proxy, \.logFormat, default: .logfmt, doc: "one line per decision and per closed tunnel, on stderr").restartOnly(\.logFormat),
        .init("metrics_listen", .proxy, .string, \.metricsListen, unset: "off", values: "IP:PORT", example: #""127.0.0.1:9128""#,
              doc: "`/metrics` and `/healthz` ([logs-and-metrics.md](logs-and-metrics.md#metrics-and-health))") { decoder, value, keyPath in
            guard let text = decoder.string(value, keyPath) else { return nil }
            if let address = ListenAddress(text) { return address }
            decoder.error(keyPath, "proxy.metrics_listen: \"\(text)\" is not IP:PORT (for example \"127.0.0.1:9128\")")
            return nil
        }.restartOnly(\.metricsListen),
        .seconds("request_timeout", .proxy, \.requestTimeout, default: 10, doc: "the whole CONNECT request, from accept to the blank line"),
        .seconds("dns_timeout", .proxy, \.dnsTimeout, default: 10, doc: "resolving one destination"),
        .seconds("connect_timeout", .proxy, \.connectTimeout, default: 10, doc: "TCP connect, all of the upstream's addresses together"),
        .seconds("handshake_timeout", .proxy, \.handshakeTimeout, default: 10, doc: "each TLS handshake (upstream, then client)"),
        .seconds("idle_timeout", .proxy, \.idleTimeout, default: 300, doc: "a tunnel with no traffic either way for this long is closed"),
        .seconds("drain_timeout", .proxy, \.drainTimeout, default: 30, doc: "on SIGTERM, how long open tunnels may finish").restartOnly(\.drainTimeout),
        .integer("max_connections", .proxy, \.maxConnections, in: 1...1_000_000, unset: "what the open-file limit allows", example: "10000",
                 doc: "open client connections at most"),
        .integer("max_tunnels_per_client", .proxy, \.maxTunnelsPerClient, in: 1...1_000_000, unset: "unlimited", example: "256",
                 doc: "tunnels one client (a local uid, a remote address; unknown clients together) holds at most"),
        .integer("relay_buffer_bytes", .proxy, \.relayBufferBytes, in: 4_096...(64 << 20), default: 262_144,
                 doc: "bytes per direction (256 KiB by default), before reading pauses"),
        .seconds("admin_timeout", .proxy, \.adminTimeout, default: 10,
                 doc: "each `metrics_listen` request in total, from accept to the answer").restartOnly(\.adminTimeout),
        .choice("refusal", .proxy, \.refusal, default: .connect,
                doc: "how a refusal is answered ([trust-decisions.md](trust-decisions.md#the-refusal-inside-tls-refusal--in-tls))"),
        .nonEmptyString("pid_file", .proxy, \.pidFile, unset: "none", example: #""/run/user/1000/pinproxy.pid""#,
                        doc: "for `pinproxy reload`, outside systemd ([deployment.md](deployment.md#reload))").restartOnly(\.pidFile),
        .init("report_to", .proxy, .strings, \.reportTo, default: [], shown: .unset("none"), values: #"list of "file:PATH" or https:// URLs"#,
              example: #"["file:/var/log/pinproxy/reports.jsonl", "https://reports.example.com/pinproxy"]"#,
              doc: "pin-failure report destinations ([logs-and-metrics.md](logs-and-metrics.md#pin-failure-reports-report_to))") { decoder, value, keyPath in
            guard let texts = decoder.strings(value, keyPath) else { return nil }
            var destinations: [ReportDestination] = []
            for text in texts {
                if let destination = ReportDestination(text, relativeTo: "") { destinations.append(destination) } else {
                    decoder.error(keyPath, element: text, "proxy.report_to: \"\(text)\" is neither \"file:PATH\" nor an https:// URL")
                }
            }
            return destinations
        }.restartOnly(\.reportTo),
        .integer("report_rate_limit", .proxy, \.reportRateLimit, in: 1...Int.max, default: 600, doc: "reports a minute, all hosts together"),
        .integer("report_file_max_bytes", .proxy, \.reportFileMaxBytes, in: 1...Int.max, default: 64 << 20,
                 doc: "a `file:` destination stops growing here (64 MiB by default)"),
        .seconds("verify_command_timeout", .proxy, \.verifyCommandTimeout, default: 5,
                 doc: "how long a custom check may run ([trust-decisions.md](trust-decisions.md#a-custom-check-verify_command))"),
        .init("verify_command_cache", .proxy, .integer(0...86_400), \.verifyCommandCache, default: 300,
              doc: "seconds an exit status is reused; 0 runs the command every time") { $0.integer($1, $2, in: 0...86_400).map(TimeInterval.init) },
        .integer("verify_command_concurrency", .proxy, \.verifyCommandConcurrency, in: 1...64, default: 4,
                 doc: "custom checks running at once").restartOnly(\.verifyCommandConcurrency),
        .seconds("client_identity_timeout", .proxy, \.clientIdentityTimeout, default: 2,
                 doc: "with `[clients]`, looking up the client's user name, unit and program off the loop ([policy per client](#policy-per-client-clients))"),
        .bool("report_client_identity", .proxy, \.reportClientIdentity, default: false,
              doc: "reports carry `pinproxy-client` (user names and paths would go to the collector)"),
        .nonEmptyString("ct_log_list", .proxy, \.ctLogList, unset: "none", values: "file in the format of Chrome's log_list.json v3",
                        example: #""/etc/pinproxy/ct-log-list.json""#,
                        doc: "the Certificate Transparency logs `ct` counts SCTs from; required when an entry sets `ct` ([trust-decisions.md](trust-decisions.md#certificate-transparency-ct))"),
    ])

    static let capture = ConfigKeys<CaptureSettings>([
        .init("ports", .capture, .ports, \.ports, default: [443],
              doc: "outgoing TCP to these goes to `transparent_listen` (empty: nothing is captured)") { decoder, value, keyPath in
            // Empty is allowed: nothing is captured.
            value.array?.isEmpty == true ? [] : decoder.ports(value, keyPath)?.sorted()
        }.appliedByEgress(),
        .bool("local", .capture, \.local, default: false, doc: "true: this host's own addresses are captured too").appliedByEgress(),
        .bool("block_quic", .capture, \.blockQUIC, default: true,
              doc: "outgoing UDP to these ports is rejected (HTTP/3 falls back to TCP)").appliedByEgress(),
        .init("exempt_users", .capture, .strings, \.exemptUsers, default: ["pinproxy"], values: "list of user names",
              doc: "their processes (pinproxy's own) go out uncaptured") { decoder, value, keyPath in
            guard let names = decoder.strings(value, keyPath) else { return nil }
            for name in names where !ConfigDecoder.isUserName(name) {
                decoder.error(keyPath, element: name, "capture.exempt_users: \"\(name)\" is not a user name (letters, digits, \"_\", \"-\" and \".\", not starting with \"-\")")
            }
            return names
        }.appliedByEgress(),
        .init("forward_interfaces", .capture, .strings, \.forwardInterfaces, default: [], values: "list of interface names, or a prefix and `*`",
              doc: "TCP to the ports forwarded from these (containers' bridges) is captured too") { decoder, value, keyPath in
            guard let names = decoder.strings(value, keyPath) else { return nil }
            for name in names {
                if let problem = ForwardInterface.problem(name) { decoder.error(keyPath, element: name, "capture.forward_interfaces: \(problem)") }
            }
            return names
        }.appliedByEgress(),
    ])

    static let clients = ConfigKeys<RawClientSection>([
        .init("allow", .clients, .strings, \.allow, unset: "no limit", values: "list of host patterns", example: #"["git.example.com"]"#,
              doc: "the hosts the client may reach; `[]`: none") { $0.hostPatterns($1, $2) },
        .init("deny", .clients, .strings, \.deny, default: [], values: "list of host patterns",
              doc: "hosts the client may not reach, whatever an `allow` says") { $0.hostPatterns($1, $2) ?? [] },
        .bool("enforce", .clients, \.enforce, default: true, doc: "false: the section's `client-denied` refusals are report-only"),
    ])

    /// The declared default of key `name` of `section`, typed as its field is.
    static func typedDefault(_ section: ConfigSection, _ name: String) -> any Sendable {
        let key: (any Sendable)? = switch section {
        case .proxy: proxy[name]?.typedDefault
        case .capture: capture[name]?.typedDefault
        case .policy: policy[name]?.typedDefault
        case .clients: clients[name]?.typedDefault
        }
        guard let key else { preconditionFailure("\(section).\(name) is not a declared key") }
        return key
    }
}

extension ProxySettings {
    /// The restart-only keys whose values differ between these settings (the running daemon's)
    /// and `loaded`: those a reload cannot apply.
    public func restartOnlyChanges(to loaded: ProxySettings) -> [String] {
        ConfigSchema.proxy.restartOnlyChanges(from: self, to: loaded)
    }
}
