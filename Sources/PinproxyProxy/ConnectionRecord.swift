import FoundationEssentials
import PinproxyCore
import Logging
import PinproxyInterop
import PinproxyPolicy
import PinproxyService

/// What happened to one connection, as one value: who asked (listener, client, what
/// `[clients]` decided), for what (host, port, entry), the upstream it connected to, and the
/// event: its decision (outcome, reason, the verdict's checks, ALPN, a reopened upstream's
/// change) or its tunnel's end (bytes, duration). The connection hands it to its I/O
/// (`ConnectionIO.record`); `ConnectionRecorder` turns it into the decision line, the
/// `tunnel-closed` line, the metrics and the pin-failure report, so that every mode gets the
/// same fields and labels.
struct ConnectionRecord {
    /// A connection's decision: the upstream admitted or refused, a tunnel opened, or the
    /// client gone before its tunnel opened.
    struct Decision {
        var outcome: ConnectionOutcome
        var reason: RefusalReason?
        /// What the client was answered (the CONNECT's status, or the in-TLS page's); nil when
        /// nothing was sent (`client-gone`).
        var status: Int?
        var detail: String
        /// The verdict on the upstream's chain (or on the request), with what it presented.
        var verdict: Verdict? = nil
        /// What the upstream negotiated, on a decision about an upstream's chain.
        var alpn: ALPNProtocol? = nil
        var reopen: Reopen = .first
    }

    /// Whether a decision is the connection's first, or that on an upstream reopened for the
    /// client's ALPN offer (after the 200 told the first).
    enum Reopen {
        case first
        /// `changed` is the reopened upstream's outcome when it differs from the first's.
        case reopened(changed: Verdict.Outcome?)
    }

    /// An open tunnel's end.
    struct TunnelEnd {
        /// What the upstream negotiated (nil for a `mode = "tunnel"` relay, which reads no TLS).
        var alpn: ALPNProtocol?
        var bytesUp: Int
        var bytesDown: Int
        /// From the relay's start, in seconds.
        var duration: TimeInterval
        var why: String
    }

    enum Event {
        case decision(Decision)
        case tunnelClosed(TunnelEnd)
    }

    let listener: ListenerKind
    let client: SocketAddress?
    /// What `[clients]` decided (nil before the client was identified).
    let clientDecision: ClientDecision?
    let subject: ConnectionSubject?
    /// The upstream's address, once connected.
    let upstream: SocketAddress?
    let event: Event
    /// Whether a pin-failure report carries the client's identity (`report_client_identity`).
    let reportsClientIdentity: Bool

    /// The `client` metric label: the matching `[clients]` sections, or `none`.
    var clientLabel: String { clientDecision?.metricLabel ?? ProxyMetrics.noClientLabel }

    /// Whether the decision counts in the metrics and reports: a connection's first, or a
    /// reopened upstream's refusal (its admission was counted with the first).
    var isCounted: Bool {
        guard case .decision(let decision) = event else { return false }
        if case .reopened = decision.reopen { return decision.outcome == .refused }
        return true
    }

    // MARK: The lines

    /// `client_uid`, `client_user`, `client_unit` and `client_exe`, as far as they are known;
    /// for a forwarded client, `client_address` and `client_net` (the `net:` sections that matched).
    static func identityFields(_ decision: ClientDecision?) -> [(AccessLog.Field, String)] {
        let client: LocalClient
        switch decision?.identity {
        case .local(let local), .partlyKnown(let local, _): client = local
        case .forwarded(let address):
            return [(.clientAddress, address.description)] + (decision?.networkSections.map { [(.clientNet, $0)] } ?? [])
        case .unknown, .remote, nil: return []
        }
        var fields: [(AccessLog.Field, String)] = [(.clientUID, String(client.uid))]
        if let user = client.user { fields.append((.clientUser, user)) }
        if let unit = client.unit { fields.append((.clientUnit, unit)) }
        if let exe = client.exe { fields.append((.clientExe, exe)) }
        return fields
    }

    /// `ct` (compliant, ct-missing, not-applied or not-checked) and `scts` (each SCT: log,
    /// operator, time, source, counted or why not), when the entry sets `ct`.
    static func ctFields(_ verdict: Verdict) -> [(AccessLog.Field, String)] {
        guard verdict.entry.policy.ct != .off else { return [] }
        guard let judgement = verdict.certificateTransparency else { return [(.ct, "not-checked")] }
        let answer = switch judgement.outcome {
        case .compliant: "compliant"
        case .notCompliant: RefusalReason.ctMissing.rawValue
        case .notApplicable: "not-applied"
        }
        return [(.ct, answer), (.scts, judgement.entries.isEmpty ? "none" : judgement.entries.map(\.description).joined(separator: "; "))]
    }

    /// The line this record makes: level, fields and certificates. The decision line
    /// (`connection`): a decision on an upstream's chain says which protocol that upstream
    /// negotiated (`alpn`, `-` for none); a reopened upstream's outcome, when it differs from
    /// the first's, is `reopen_outcome` and `reopen_reason`. `tunnel-closed`: bytes and
    /// duration. A local client's identity is on both.
    var line: (level: Logger.Level, fields: [(AccessLog.Field, String)], certificates: AccessLog.Certificates?) {
        var fields: [(AccessLog.Field, String)] = [(.client, client?.description ?? "-")]
        fields += Self.identityFields(clientDecision)
        fields.append((.listener, listener.rawValue))
        if let subject {
            fields += [(.host, subject.host.description), (.port, String(subject.port))]
            if let entry = subject.entry { fields.append((.entry, entry.name)) }
        }
        if let upstream { fields.append((.upstream, upstream.description)) }
        switch event {
        case .decision(let decision):
            fields.append((.outcome, decision.outcome.rawValue))
            if let reason = decision.reason { fields.append((.reason, reason.rawValue)) }
            if let status = decision.status { fields.append((.status, String(status))) }
            if case .reopened(let changed?) = decision.reopen {
                switch changed {
                case .allow: fields.append((.reopenOutcome, ConnectionOutcome.allowed.rawValue))
                case .reportOnly(let reason): fields += [(.reopenOutcome, ConnectionOutcome.reportOnly.rawValue), (.reopenReason, reason.rawValue)]
                case .refuse(let reason): fields += [(.reopenOutcome, ConnectionOutcome.refused.rawValue), (.reopenReason, reason.rawValue)]
                }
            }
            if decision.verdict != nil { fields.append((.alpn, decision.alpn?.description ?? "-")) }
            if !decision.detail.isEmpty { fields.append((.detail, decision.detail)) }
            if let verdict = decision.verdict { fields += Self.ctFields(verdict) }
            let certificates = decision.verdict.map { AccessLog.Certificates(presented: $0.presented, verified: $0.verifiedPath) }
            let level: Logger.Level = decision.outcome == .allowed || decision.outcome == .clientGone ? .info : .warning
            return (level, fields, certificates)
        case .tunnelClosed(let end):
            fields += [(.alpn, end.alpn?.description ?? "-"), (.bytesUp, String(end.bytesUp)), (.bytesDown, String(end.bytesDown)),
                       (.duration, end.duration.fixed(places: 3)), (.detail, end.why)]
            return (.info, fields, nil)
        }
    }
}

/// Turns connection records into what they say: the line, the metrics (`pinproxy_connections_total`,
/// `pinproxy_refusals_total`, the reopen and tunnel counters) and the pin-failure report. The
/// one place a connection's outcome is written.
struct ConnectionRecorder: Sendable {
    let log: AccessLog
    let metrics: ProxyMetrics
    /// Sends a pin-failure report (`SharedState.report`) for a verdict on `host`:`port`.
    let report: @Sendable (Verdict, TargetHost, UInt16, ClientIdentity?) -> Void

    func record(_ record: ConnectionRecord) {
        let line = record.line
        switch record.event {
        case .decision(let decision):
            log.emit(line.level, "connection", line.fields, certificates: line.certificates)
            if case .reopened(_?) = decision.reopen { metrics.reopenVerdictChanged() }
            guard record.isCounted else { return }
            let label = record.clientLabel
            metrics.connection(outcome: decision.outcome, reason: decision.reason, listener: record.listener, client: label)
            if let reason = decision.reason, decision.outcome == .refused || decision.outcome == .reportOnly {
                let pattern = record.subject?.entry.map(ProxyMetrics.patternLabel(for:)) ?? ProxyMetrics.noPatternLabel
                metrics.refusal(hostPattern: pattern, reason: reason, reportOnly: decision.outcome == .reportOnly, client: label)
            }
            if let verdict = decision.verdict, let subject = record.subject {
                report(verdict, subject.host, subject.port, record.reportsClientIdentity ? record.clientDecision?.identity : nil)
            }
        case .tunnelClosed:
            log.emit(line.level, "tunnel-closed", line.fields)
            metrics.tunnelClosed()
        }
    }
}
