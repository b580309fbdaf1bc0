import FoundationEssentials
import PinproxyInterop

/// A `file:` destination as its thread sees it: the file open now (see `AppendOnlyFile` for
/// what is refused), and whether it reached `report_file_max_bytes`. pinproxy never renames
/// or truncates it: a full file drops reports until it is reopened (SIGHUP, after logrotate).
struct ReportFile {
    let path: String
    private var file: AppendOnlyFile?
    /// The bound in force when the file was found full; a reload that raises it writes again.
    private var fullUnder: Int?

    init(path: String) {
        self.path = path
    }

    /// Opens the path anew. A file that is refused leaves the one open before in use (or none).
    mutating func reopen(log: PinFailureReporter.LogLine) {
        do {
            file = try AppendOnlyFile(path: path)
            fullUnder = nil
        } catch {
            log(false, "cannot open the report file \(path): it \(error); "
                + (file == nil ? "its reports are dropped until it can be opened" : "reports go on to the file opened before"))
        }
    }

    /// Appends the reports of `batch` that fit under `maxBytes` (whole lines, in order);
    /// returns how many were written. The rest are dropped.
    mutating func write(_ batch: [PinFailureReporter.Pending], maxBytes: Int, log: PinFailureReporter.LogLine) -> Int {
        if file == nil {
            do { file = try AppendOnlyFile(path: path) } catch {
                log(false, "cannot open the report file \(path): it \(error); \(batch.count) report(s) dropped")
                return 0
            }
        }
        guard let file else { return 0 }
        if let fullUnder, maxBytes <= fullUnder { return 0 }
        fullUnder = nil
        var bytes = Data()
        var fitting = 0
        for report in batch {
            guard file.size + bytes.count + report.json.count + 1 <= maxBytes else {
                fullUnder = maxBytes
                log(true, "the report file \(path) reached report_file_max_bytes (\(maxBytes) bytes): reports to it are dropped until it is reopened (SIGHUP)")
                break
            }
            bytes.append(report.json)
            bytes.append(UInt8(ascii: "\n"))
            fitting += 1
        }
        guard !bytes.isEmpty else { return 0 }
        if let failure = file.append(bytes) {
            log(false, "cannot write to the report file \(path): \(failure); \(fitting) report(s) dropped")
            return 0
        }
        return fitting
    }
}
