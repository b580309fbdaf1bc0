import Foundation
import PinproxyInterop

/// Every config key, declared once: the decoder reads tables through these, `check`'s
/// unknown-key hints and a reload's restart-only warning come from them, and a test holds
/// `config/pinproxy.toml` and the key tables of `docs/configuration.md` to them. The order of
/// each list is the order hints and the warning name keys in.
enum ConfigSchema {
    /// The top-level tables (`[resolve]`'s keys are host names, `[hosts]`'s patterns and
    /// `[clients]`'s selectors: they are not declared).
    static let tables = ["proxy", "resolve", "capture", "default", "hosts", "clients"]

    static let proxy = ConfigKeys<ProxySettings>([
        .init("listen", .proxy, .strings, default: .value(#"["127.0.0.1:3128"]"#), values: "list of IP:PORT",
              doc: #"addresses to accept CONNECT on (IP literal and port; IPv6 as `"[::1]:3128"`); not bound when systemd passes sockets"#) {
            if let addresses = $0.listenAddresses($1, $2, allowEmpty: false) { $3.listen = addresses }
        }.restartOnly(\.listen),
        .init("transparent_listen", .proxy, .strings, default: .unset("none"), values: "list of IP:PORT",
              doc: "the egress lock's listener ([deployment.md](deployment.md#enforce-for-every-process))") {
            if let addresses = $0.listenAddresses($1, $2, allowEmpty: true) { $3.transparentListen = addresses }
        }.restartOnly(\.transparentListen),
        .nonEmptyString("ca_dir", .proxy,
                        default: .unset("`$STATE_DIRECTORY`, else `/var/lib/pinproxy` (root), else `$XDG_STATE_HOME/pinproxy` or `~/.local/state/pinproxy`"),
                        doc: "where the local CA is created and kept (key 0600, directory 0700); `scripts/run` sets `$STATE_DIRECTORY` to `.build/run-state`") { $0.caDirectory = $1 }.restartOnly(\.caDirectory),
        .ports("allow_ports", .proxy, default: .value("[443]"),
               doc: "destination ports a CONNECT may name (an entry's `ports` overrides it)") { $0.allowPorts = $1 },
        .bool("block_private_destinations", .proxy, default: .value("true"),
              doc: "refuse destinations that resolve to special-purpose addresses (`destination-denied`; see [how-it-works.md](how-it-works.md#the-data-flow))") {
            $0.blockPrivateDestinations = $1
        },
        .integer("workers", .proxy, in: 1...256, default: .unset("one per core"), doc: "event loops") { $0.workers = $1 }.restartOnly(\.workers),
        .choice("log_format", .proxy, ProxySettings.LogFormat.self, default: .value(#""logfmt""#),
                doc: "one line per decision and per closed tunnel, on stderr") { $0.logFormat = $1 }.restartOnly(\.logFormat),
        .init("metrics_listen", .proxy, .string, default: .unset("off"), values: "IP:PORT",
              doc: "`/metrics` and `/healthz` ([logs-and-metrics.md](logs-and-metrics.md#metrics-and-health))") { decoder, value, keyPath, proxy in
            guard let text = decoder.string(value, keyPath) else { return }
            if let address = ListenAddress(text) { proxy.metricsListen = address } else {
                decoder.error(keyPath, "proxy.metrics_listen: \"\(text)\" is not IP:PORT (for example \"127.0.0.1:9128\")")
            }
        }.restartOnly(\.metricsListen),
        .seconds("request_timeout", .proxy, default: .value("10"), doc: "the whole CONNECT request, from accept to the blank line") {
            $0.requestTimeout = $1
        },
        .seconds("dns_timeout", .proxy, default: .value("10"), doc: "resolving one destination") { $0.dnsTimeout = $1 },
        .seconds("connect_timeout", .proxy, default: .value("10"), doc: "TCP connect, all of the upstream's addresses together") {
            $0.connectTimeout = $1
        },
        .seconds("handshake_timeout", .proxy, default: .value("10"), doc: "each TLS handshake (upstream, then client)") {
            $0.handshakeTimeout = $1
        },
        .seconds("idle_timeout", .proxy, default: .value("300"), doc: "a tunnel with no traffic either way for this long is closed") {
            $0.idleTimeout = $1
        },
        .seconds("drain_timeout", .proxy, default: .value("30"), doc: "on SIGTERM, how long open tunnels may finish") {
            $0.drainTimeout = $1
        }.restartOnly(\.drainTimeout),
        .integer("max_connections", .proxy, in: 1...1_000_000, default: .unset("what the open-file limit allows"),
                 doc: "open client connections at most") { $0.maxConnections = $1 },
        .integer("relay_buffer_bytes", .proxy, in: 4_096...(64 << 20), default: .value("262144"),
                 doc: "bytes per direction (256 KiB by default), before reading pauses") { $0.relayBufferBytes = $1 },
        .seconds("admin_timeout", .proxy, default: .value("10"),
                 doc: "each `metrics_listen` request in total, from accept to the answer") { $0.adminTimeout = $1 }.restartOnly(\.adminTimeout),
        .choice("refusal", .proxy, ProxySettings.RefusalDelivery.self, default: .value(#""connect""#),
                doc: "how a refusal is answered ([trust-decisions.md](trust-decisions.md#the-refusal-inside-tls-refusal--in-tls))") {
            $0.refusal = $1
        },
        .nonEmptyString("pid_file", .proxy, default: .unset("none"),
                        doc: "for `pinproxy reload`, outside systemd ([deployment.md](deployment.md#reload))") { $0.pidFile = $1 }.restartOnly(\.pidFile),
        .init("report_to", .proxy, .strings, default: .unset("none"), values: #"list of "file:PATH" or https:// URLs"#,
              doc: "pin-failure report destinations ([logs-and-metrics.md](logs-and-metrics.md#pin-failure-reports-report_to))") { decoder, value, keyPath, proxy in
            guard let texts = decoder.strings(value, keyPath) else { return }
            var destinations: [ReportDestination] = []
            for text in texts {
                if let destination = ReportDestination(text, relativeTo: "") { destinations.append(destination) } else {
                    decoder.error(keyPath, element: text, "proxy.report_to: \"\(text)\" is neither \"file:PATH\" nor an https:// URL")
                }
            }
            proxy.reportTo = destinations
        }.restartOnly(\.reportTo),
        .integer("report_rate_limit", .proxy, in: 1...Int.max, default: .value("600"), doc: "reports a minute, all hosts together") {
            $0.reportRateLimit = $1
        },
        .integer("report_file_max_bytes", .proxy, in: 1...Int.max, default: .value("67108864"),
                 doc: "a `file:` destination stops growing here (64 MiB by default)") { $0.reportFileMaxBytes = $1 },
        .seconds("verify_command_timeout", .proxy, default: .value("5"),
                 doc: "how long a custom check may run ([trust-decisions.md](trust-decisions.md#a-custom-check-verify_command))") { $0.verifyCommandTimeout = $1 },
        .integer("verify_command_cache", .proxy, in: 0...86_400, default: .value("300"),
                 doc: "seconds an exit status is reused; 0 runs the command every time") { $0.verifyCommandCache = TimeInterval($1) },
        .integer("verify_command_concurrency", .proxy, in: 1...64, default: .value("4"), doc: "custom checks running at once") {
            $0.verifyCommandConcurrency = $1
        }.restartOnly(\.verifyCommandConcurrency),
        .seconds("client_identity_timeout", .proxy, default: .value("2"),
                 doc: "with `[clients]`, looking up the client's user name, unit and program off the loop ([policy per client](#policy-per-client-clients))") {
            $0.clientIdentityTimeout = $1
        },
        .bool("report_client_identity", .proxy, default: .value("false"),
              doc: "reports carry `pinproxy-client` (user names and paths would go to the collector)") { $0.reportClientIdentity = $1 },
    ])

    static let capture = ConfigKeys<CaptureSettings>([
        .init("ports", .capture, .ports, default: .value("[443]"), doc: "outgoing TCP to these goes to `transparent_listen` (empty: nothing is captured)") {
            decoder, value, keyPath, capture in
            // Empty is allowed: nothing is captured.
            if value.array?.isEmpty == true { capture.ports = [] } else if let ports = decoder.ports(value, keyPath) { capture.ports = ports.sorted() }
        }.appliedByEgress(),
        .bool("local", .capture, default: .value("false"), doc: "true: this host's own addresses are captured too") { $0.local = $1 }.appliedByEgress(),
        .bool("block_quic", .capture, default: .value("true"), doc: "outgoing UDP to these ports is rejected (HTTP/3 falls back to TCP)") {
            $0.blockQUIC = $1
        }.appliedByEgress(),
        .init("exempt_users", .capture, .strings, default: .value(#"["pinproxy"]"#), values: "list of user names",
              doc: "their processes (pinproxy's own) go out uncaptured") { decoder, value, keyPath, capture in
            guard let names = decoder.strings(value, keyPath) else { return }
            for name in names where !ConfigDecoder.isUserName(name) {
                decoder.error(keyPath, element: name, "capture.exempt_users: \"\(name)\" is not a user name (letters, digits, \"_\", \"-\" and \".\", not starting with \"-\")")
            }
            capture.exemptUsers = names
        }.appliedByEgress(),
    ])

    static let clients = ConfigKeys<RawClientSection>([
        .init("allow", .clients, .strings, default: .unset("no limit"), values: "list of host patterns",
              doc: "the hosts the client may reach; `[]`: none") { $3.allow = $0.hostPatterns($1, $2) },
        .init("deny", .clients, .strings, default: .value("[]"), values: "list of host patterns",
              doc: "hosts the client may not reach, whatever an `allow` says") { $3.deny = $0.hostPatterns($1, $2) ?? [] },
        .bool("enforce", .clients, default: .value("true"), doc: "false: the section's `client-denied` refusals are report-only") {
            $0.enforce = $1
        },
    ])
}

extension ProxySettings {
    /// The restart-only keys whose values differ between these settings (the running daemon's)
    /// and `loaded`: those a reload cannot apply.
    public func restartOnlyChanges(to loaded: ProxySettings) -> [String] {
        ConfigSchema.proxy.restartOnlyChanges(from: self, to: loaded)
    }
}
