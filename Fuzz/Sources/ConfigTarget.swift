import Foundation
import PinproxyPolicy

/// Config text through the daemon's loader: a valid config or diagnostics, never a crash.
/// Relative file names resolve in Fuzz/data, which holds a few certificates and CRLs.
enum ConfigTarget {
    static let now = Date(timeIntervalSince1970: 1_780_272_000)  // 2026-06-01T00:00:00Z

    static func run(_ input: [UInt8]) {
        guard let text = String(validating: input, as: UTF8.self) else { return }
        do {
            let config = try ConfigLoader.load(text: text, path: "fuzz.toml", directory: FuzzTarget.dataDirectory, now: now)
            _ = config.policies.lookup(.name("api.test"))
        } catch {
            // Every rejection says why, at a line of the file (0: the whole file).
            fuzzCheck(!error.diagnostics.isEmpty, "a config was rejected without a diagnostic")
            let lineCount = text.utf8.count { $0 == UInt8(ascii: "\n") } + 1
            for diagnostic in error.diagnostics where diagnostic.file == "fuzz.toml" {
                fuzzCheck((0...lineCount).contains(diagnostic.line), "diagnostic at line \(diagnostic.line) of \(lineCount): \(diagnostic)")
                fuzzCheck(!diagnostic.message.isEmpty, "empty diagnostic message")
            }
        }
    }
}
