import PinproxyCore
import PinproxyInterop

extension ProxyMetrics.Family {
    static let connections = Self(name: "pinproxy_connections_total", type: "counter",
                                  help: "Client connections by outcome and refusal reason.")
    static let refusals = Self(name: "pinproxy_refusals_total", type: "counter",
                               help: "Refusals (and report-only would-refuse decisions) by host pattern, reason and mode.")
    static let reopenVerdictChanges = Self(name: "pinproxy_reopen_verdict_changes_total", type: "counter",
                                           help: "Upstreams reopened for the client's ALPN offer whose verdict differs from the first upstream's.")
    static let openTunnels = Self(name: "pinproxy_open_tunnels", type: "gauge", help: "Tunnels currently open.")
    static let relayedBytes = Self(name: "pinproxy_relayed_bytes_total", type: "counter",
                                   help: "Bytes relayed through tunnels, by direction.")
    static let handshake = Self(name: "pinproxy_upstream_handshake_seconds", type: "histogram",
                                help: "Upstream TLS handshake duration in seconds.")
    static let verification = Self(name: "pinproxy_verification_seconds", type: "histogram",
                                   help: "Certificate chain, host and pin verification duration in seconds.")
    static let reloads = Self(name: "pinproxy_config_reloads_total", type: "counter", help: "Configuration reloads by result.")
    static let lastReloadSuccessful = Self(name: "pinproxy_config_last_reload_successful", type: "gauge",
                                           help: "1 when the last configuration load (start or reload) succeeded, 0 when it failed.")
    static let lastReloadSuccessTime = Self(name: "pinproxy_config_last_reload_success_timestamp_seconds", type: "gauge",
                                            help: "When the configuration was last loaded successfully, in seconds since 1970.")
    static let pinExpiryTimestamp = Self(name: "pinproxy_pin_expiry_timestamp_seconds", type: "gauge",
                                         help: "When the entry's pins stop protecting it (the end of its expires day, or its earliest pinned certificate's notAfter), in seconds since 1970.")
    static let pinExpiryDays = Self(name: "pinproxy_pin_expiry_days", type: "gauge",
                                    help: "Deprecated (use pinproxy_pin_expiry_timestamp_seconds): days until the entry's earliest pinned certificate or expires date runs out.")
    static let upstreamCertificateExpiry = Self(name: "pinproxy_upstream_certificate_expiry_timestamp_seconds", type: "gauge",
                                                help: "Earliest notAfter of the leaf and intermediates last verified for a one-host entry, in seconds since 1970.")
    static let mintedLeaves = Self(name: "pinproxy_minted_leaves_total", type: "counter", help: "Leaf certificates the local CA minted for clients (each with a new key).")
    static let foreignTransparentListeners = Self(name: "pinproxy_foreign_transparent_listeners_total", type: "counter", help: "Checks (every minute) that found a socket other than pinproxy's listening on a transparent address.")
    static let clientLookups = Self(name: "pinproxy_client_lookups_total", type: "counter", help: "Sockets of local clients looked up ([clients]): found, or unknown (gone, not established, not held by a process).")
    static let buildInfo = Self(name: "pinproxy_build_info", type: "gauge", help: "Always 1: the version and commit pinproxy was built from.")
    static let ctLogListAge = Self(name: "pinproxy_ct_log_list_age_seconds", type: "gauge",
                                   help: "Seconds since the CT log list in force was published (its log_list_timestamp); over 70 days, CT is reported only.")
    static let ctSCTs = Self(name: "pinproxy_ct_scts_total", type: "counter",
                             help: "SCTs found on new upstream connections by source and whether they counted (ct).")
    static let reports = Self(name: "pinproxy_reports_total", type: "counter", help: "Pin-failure reports by result (report_to).")

    /// `# HELP` and `# TYPE` lines.
    var header: String { "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n" }
}

/// The standard process metrics every Prometheus exporter has, by their standard names.
enum ProcessFamily: CaseIterable {
    case cpuSeconds, residentMemory, virtualMemory, openDescriptors, maxDescriptors, startTime

    var family: ProxyMetrics.Family {
        switch self {
        case .cpuSeconds: .init(name: "process_cpu_seconds_total", type: "counter", help: "Total user and system CPU time spent in seconds.")
        case .residentMemory: .init(name: "process_resident_memory_bytes", type: "gauge", help: "Resident memory size in bytes.")
        case .virtualMemory: .init(name: "process_virtual_memory_bytes", type: "gauge", help: "Virtual memory size in bytes.")
        case .openDescriptors: .init(name: "process_open_fds", type: "gauge", help: "Number of open file descriptors.")
        case .maxDescriptors: .init(name: "process_max_fds", type: "gauge", help: "Maximum number of open file descriptors.")
        case .startTime: .init(name: "process_start_time_seconds", type: "gauge", help: "Start time of the process since unix epoch in seconds.")
        }
    }

    var name: String { family.name }

    func value(in stats: ProcessStats) -> Double {
        switch self {
        case .cpuSeconds: stats.cpuSeconds
        case .residentMemory: stats.residentMemoryBytes
        case .virtualMemory: stats.virtualMemoryBytes
        case .openDescriptors: Double(stats.openDescriptors)
        case .maxDescriptors: Double(stats.maxDescriptors)
        case .startTime: stats.startTimeSeconds
        }
    }
}
