import FoundationEssentials
import PinproxyCore

/// `RefusalReason.traits` as the outside reads it: `pinproxy reasons` (text and JSON, which the
/// end-to-end harness loads) and the reason table of docs/trust-decisions.md.
extension RefusalReason {
    /// One reason's row, in the names `pinproxy reasons --json` gives its columns.
    public struct Row: Codable, Sendable, Equatable {
        public let reason: String
        public let status: Int
        public let proxyStatusError: String
        public let mayBeReportOnly: Bool
        public let decidedBy: String
        public let sendsReport: Bool

        enum CodingKeys: String, CodingKey {
            case reason, status
            case proxyStatusError = "proxy_status_error"
            case mayBeReportOnly = "may_be_report_only"
            case decidedBy = "decided_by"
            case sendsReport = "sends_report"
        }
    }

    /// Every reason in priority order, with its traits.
    public static var rows: [Row] {
        allCases.map { reason in
            let traits = reason.traits
            return Row(reason: reason.rawValue, status: traits.httpStatus, proxyStatusError: traits.proxyStatusError.rawValue,
                       mayBeReportOnly: traits.mayBeReportOnly, decidedBy: traits.isPolicyDecision ? "verdict" : "proxy",
                       sendsReport: traits.isCertificateReason)
        }
    }

    /// The rows as `pinproxy reasons` prints them: aligned columns under a header.
    public static var textTable: String {
        let header = ["REASON", "STATUS", "PROXY-STATUS ERROR", "REPORT-ONLY", "DECIDED BY", "REPORT"]
        let cells = [header] + rows.map { row in
            [row.reason, String(row.status), row.proxyStatusError, row.mayBeReportOnly ? "yes" : "no", row.decidedBy, row.sendsReport ? "yes" : "no"]
        }
        let widths = header.indices.map { column in cells.map { $0[column].count }.max() ?? 0 }
        return cells.map { line in
            line.enumerated().map { column, cell in
                column == line.count - 1 ? cell : cell.padded(to: widths[column])
            }.joined(separator: "  ")
        }.joined(separator: "\n") + "\n"
    }

    /// The heading of docs/trust-decisions.md the reason table follows.
    static let docsHeading = "## What a refusal looks like"

    /// The reason table of docs/trust-decisions.md.
    static var markdownTable: String {
        var lines = ["| reason | status | `Proxy-Status` `error` | report-only with `enforce = false` | decided by | pin-failure report |",
                     "|---|---|---|---|---|---|"]
        for row in rows {
            lines.append("| \(row.reason) | \(row.status) | `\(row.proxyStatusError)` | \(row.mayBeReportOnly ? "yes" : "no") | \(row.decidedBy) | \(row.sendsReport ? "sent" : "no") |")
        }
        return lines.joined(separator: "\n")
    }
}
