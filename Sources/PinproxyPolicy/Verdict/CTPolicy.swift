import FoundationEssentials
import PinproxyCore
import PinproxyInterop

/// Chrome's Certificate Transparency policy, as its text states it
/// (https://googlechrome.github.io/CertificateTransparency/ct_policy.html; the rules are
/// written out in docs/trust-decisions.md), judged at the time of check. Pure: OpenSSL has
/// already said which signatures hold; this decides which SCTs count and whether they suffice.
public enum CTPolicy {
    /// One SCT and what the policy made of it.
    public struct Entry: Sendable, Equatable, CustomStringConvertible {
        public let sct: SCTObservation
        /// The log that issued it, if the list has it.
        public let log: CTLogList.Log?
        /// Whether it counts towards compliance.
        public let counted: Bool
        /// Why it does not count (nil when it does).
        public let whyNot: String?

        /// `log="Log A" operator="Op 1" time=… source=embedded counted` or `… not counted: bad signature`.
        public var description: String {
            let name = log.map { "log=\"\($0.description)\" operator=\"\($0.operatorName)\"" }
                ?? "log=\(Data(sct.logID).base64EncodedString())"
            return "\(name) time=\(rfc3339(sct.timestamp)) source=\(sct.source.rawValue) " + (whyNot.map { "not counted: \($0)" } ?? "counted")
        }
    }

    /// The policy's answer for one certificate.
    public struct Judgement: Sendable, Equatable {
        public enum Outcome: Sendable, Equatable {
            /// The chain does not end at a system-store anchor: CT does not apply.
            case notApplicable(String)
            case compliant(String)
            /// Not enough qualifying SCTs (`ct-missing`); the text says what is missing.
            case notCompliant(String)
        }

        public let outcome: Outcome
        /// Every SCT found, in the order given.
        public let entries: [Entry]
    }

    /// Embedded SCTs needed for a certificate valid this long or less; one more beyond.
    public static let shortLifetime: TimeInterval = 180 * 86_400

    /// Judges `scts` (as OpenSSL validated them) for a certificate valid from `notBefore` to
    /// `notAfter` at `time`, with the logs of `logs`. `endsAtSystemAnchor`: whether the verified
    /// chain ends at an anchor of the system store (else CT does not apply).
    public static func judge(_ scts: [SCTObservation], logs: CTLogList, notBefore: Date, notAfter: Date,
                             endsAtSystemAnchor: Bool, at time: Date) -> Judgement {
        let entries = scts.map { entry(for: $0, logs: logs) }
        guard endsAtSystemAnchor else {
            return Judgement(outcome: .notApplicable("the chain ends at an anchor outside the system store"), entries: entries)
        }
        let counted = entries.filter(\.counted)

        // Embedded: N distinct logs (Qualified, Usable, ReadOnly, or Retired before the SCT),
        // at least one of them currently approved, of at least 2 operators.
        let embedded = counted.filter { $0.sct.source == .embedded }
        let needed = notAfter.timeIntervalSince(notBefore) <= shortLifetime ? 2 : 3
        let embeddedLogs = Set(embedded.map(\.sct.logID))
        let embeddedOperators = Set(embedded.compactMap(\.log?.operatorName))
        let embeddedApproved = embedded.contains { $0.log?.state.isCurrentlyApproved == true }
        if embeddedLogs.count >= needed && embeddedOperators.count >= 2 && embeddedApproved {
            return Judgement(outcome: .compliant("\(embeddedLogs.count) embedded SCTs from \(embeddedOperators.count) operators (\(needed) needed)"),
                             entries: entries)
        }
        // TLS extension or OCSP: 2 distinct currently approved logs, of at least 2 operators.
        let delivered = counted.filter { $0.sct.source != .embedded }
        let deliveredLogs = Set(delivered.map(\.sct.logID))
        let deliveredOperators = Set(delivered.compactMap(\.log?.operatorName))
        if deliveredLogs.count >= 2 && deliveredOperators.count >= 2 {
            return Judgement(outcome: .compliant("\(deliveredLogs.count) SCTs from the TLS handshake or the OCSP staple, from \(deliveredOperators.count) operators"),
                             entries: entries)
        }

        var missing: [String] = []
        if embedded.isEmpty && delivered.isEmpty {
            missing.append(entries.isEmpty ? "no SCT was presented" : "none of the \(entries.count) SCTs counts")
        }
        if !embedded.isEmpty {
            var short: [String] = []
            if embeddedLogs.count < needed { short.append("\(embeddedLogs.count) of \(needed) logs") }
            if embeddedOperators.count < 2 { short.append("\(embeddedOperators.count) of 2 operators") }
            if !embeddedApproved { short.append("none from a qualified, usable or readonly log") }
            missing.append("embedded SCTs: " + short.joined(separator: ", "))
        }
        if !delivered.isEmpty {
            var short: [String] = []
            if deliveredLogs.count < 2 { short.append("\(deliveredLogs.count) of 2 logs") }
            if deliveredOperators.count < 2 { short.append("\(deliveredOperators.count) of 2 operators") }
            missing.append("TLS/OCSP SCTs: " + short.joined(separator: ", "))
        }
        return Judgement(outcome: .notCompliant("not enough qualifying SCTs: " + missing.joined(separator: "; ")), entries: entries)
    }

    /// Whether one SCT counts on its own: a valid signature from a known log in a state that
    /// counts for its source.
    static func entry(for sct: SCTObservation, logs: CTLogList) -> Entry {
        let log = logs.log(id: sct.logID)
        func no(_ why: String) -> Entry { Entry(sct: sct, log: log, counted: false, whyNot: why) }
        guard let log else { return no("unknown log") }
        switch sct.signature {
        case .valid: break
        case .invalid: return no("bad signature")
        case .unknownLog: return no("unknown log")
        case .unknownVersion: return no("unknown SCT version")
        }
        switch log.state {
        case .qualified, .usable, .readonly:
            break
        case .retired:
            guard sct.source == .embedded else { return no("the log is retired (only embedded SCTs of retired logs count)") }
            guard sct.timestamp < log.stateSince else { return no("the log was retired on \(rfc3339(log.stateSince)), before the SCT") }
        case .pending, .rejected:
            return no("the log is \(log.state.rawValue)")
        }
        return Entry(sct: sct, log: log, counted: true, whyNot: nil)
    }
}
