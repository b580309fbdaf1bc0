import ArgumentParser
import FoundationEssentials
import PinproxyPolicy

/// `pinproxy reasons`: the refusal reasons and what pinproxy does with each (`RefusalReason.traits`).
struct ReasonsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reasons",
        abstract: "List the refusal reasons, in priority order, with the status, Proxy-Status error and treatment of each.",
        discussion: """
            REPORT-ONLY: whether enforce = false turns the refusal into a logged "would refuse". DECIDED BY: the \
            verdict (from the host entry and the certificates) or the proxy (the request, destination and upstream). \
            REPORT: whether a pin-failure report (report_to) is sent. --json prints the same rows as a JSON array, \
            for scripts.
            """
    )

    @Flag(name: .long, help: "Print a JSON array of objects (reason, status, proxy_status_error, may_be_report_only, decided_by, sends_report).")
    var json = false

    func run() throws {
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            let data = try encoder.encode(RefusalReason.rows)
            print(String(decoding: data, as: UTF8.self))
        } else {
            print(RefusalReason.textTable, terminator: "")
        }
    }
}
