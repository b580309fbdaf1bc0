import Foundation
import PinproxyInterop
import PinproxyPolicy

/// A Certificate Transparency log list (`ct_log_list`), through `CTLogList.parse`, then
/// OpenSSL's log store built from it; the same bytes as a TLS-encoded SCT list.
enum CTLogListTarget {
    static func run(_ input: [UInt8]) {
        _ = SignedCertificateTimestamps.list(tlsEncoded: input)
        guard let list = try? CTLogList.parse(input) else { return }
        fuzzCheck(!list.logs.isEmpty, "a list without logs was accepted")
        var seen = Set<[UInt8]>()
        for log in list.logs {
            fuzzCheck(log.id == SHA256.hash(log.key), "log \(log.description): its id is not the SHA-256 of its key")
            fuzzCheck(seen.insert(log.id).inserted, "log \(log.description): its id is listed twice")
            fuzzCheck(list.log(id: log.id) == log, "log \(log.description) is not found by its id")
        }
        // Any key OpenSSL cannot read makes the store an error, never a crash.
        _ = try? CTLogs(path: "fuzz.json", list: list)
    }
}
