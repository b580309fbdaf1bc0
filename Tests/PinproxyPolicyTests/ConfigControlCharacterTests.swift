import PinproxyPolicy
import XCTest

/// Raw control characters are refused before TOMLKit parses the text: toml++ asserts on some of
/// them (found by the config fuzz target, Fuzz/regressions/config/), which aborts the process.
final class ConfigControlCharacterTests: XCTestCase {
    private func diagnostics(_ text: String) -> [String] {
        do {
            _ = try ConfigLoader.load(text: text, path: "c.toml", directory: NSTemporaryDirectory())
            return []
        } catch {
            return error.diagnostics.map(\.description)
        }
    }

    func testControlCharactersAfterATableHeaderBracketAreRefused() {
        // Each of these aborted the loader inside toml++ (parse_key's assertion).
        for header in ["[\u{01}]", "[ \u{01}]", "[[\u{02}]]", "[\u{1B}]", "[\u{7F}]", "[\u{0B}]", "[\u{0C}]", "[\r]"] {
            XCTAssertEqual(diagnostics("a = 1\n" + header + "\n").count, 1, header.debugDescription)
        }
    }

    func testTheMessageNamesTheLineAndTheCharacter() {
        XCTAssertEqual(diagnostics("a = 1\n# fine\n[x]\nb = \"\u{07}\"\n"),
                       ["c.toml:4: the config holds the control character U+0007: TOML allows none but tab and line breaks (in a string, write an escape)"])
        XCTAssertEqual(diagnostics("a = 1\r\n\u{7F}"),
                       ["c.toml:2: the config holds the control character U+007F: TOML allows none but tab and line breaks (in a string, write an escape)"])
    }

    func testTabsAndLineBreaksStayValid() {
        XCTAssertEqual(diagnostics("[proxy]\r\n\tallow_ports = [443]\t# tab\r\n\n"), [])
    }
}
