import Glibc
import FoundationEssentials

/// Writes log lines to file descriptor 2 with write(2): one call per line (retried on EINTR
/// and short writes). A closed or broken stderr loses the line instead of killing the
/// process, as Foundation's FileHandle.write would.
public enum StandardError {
    /// Writes `line` and a newline.
    public static func writeLine(_ line: String) {
        var bytes = Array(line.utf8)
        bytes.append(0x0A)
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let written = Glibc.write(2, raw.baseAddress! + offset, raw.count - offset)  // non-empty: never nil
                if written > 0 {
                    offset += written
                } else if written < 0 && errno == EINTR {
                    continue
                } else {
                    return
                }
            }
        }
    }
}
