import PinproxyPolicy
import XCTest

/// Input on which toml++ (under TOMLKit) asserts, aborting the process (`check`, or the daemon
/// on a reload), is refused before TOMLKit parses the text: raw control characters, and table
/// headers that do not start with a key. Found by the config fuzz target
/// (Fuzz/regressions/config/); each case here aborted the test process before the fix.
final class ConfigTextTests: XCTestCase {
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

    func testTableHeadersMustStartWithAKey() {
        let message = "a table header must start with a key: a bare key (letters, digits, - and _) or a quoted one"
        for header in ["[=]", "[.]", "[#]", "[,]", "[{]", "[\u{E9}]", "[", "[ ", "[[", "[\t=]", "[[ =]]"] {
            XCTAssertEqual(diagnostics("a = 1\n\n" + header + "\n"), ["c.toml:3: " + message], header.debugDescription)
        }
    }

    func testAnArrayWithABraceWhereAValueShouldBeIsRefused() {
        let message = "an array holds } where a value should be"
        for value in ["[}]", "[1, }]", "[[}]]", "[ # c\n }", "[\n}"] {
            let line = 2 + value.filter { $0 == "\n" }.count  // the line of the }
            XCTAssertEqual(diagnostics("[proxy]\nallow_ports = " + value + "\n"), ["c.toml:\(line): " + message], value.debugDescription)
        }
        // Nested arrays and inline tables are not table headers, and `{}` in an array is a value.
        for text in ["a = [\n  [\n 1 ] ]\n", "a = [{}, { b = 1, }]\n", "a = { b = [1, 2] }\n"] {
            XCTAssertFalse(diagnostics(text).contains { $0.contains(message) || $0.contains("table header must start") }, text.debugDescription)
        }
    }

    func testValidHeadersAndBracketsInStringsAndCommentsPass() {
        // (These may fail later for other reasons, never for the header check.)
        for text in ["[proxy]\n[ \"resolve\" ]\n[[x-y_z]]\n[ 'q' ]\n[]\n",
                     "[default]\naction = \"deny\"  # [=\n",
                     "[default]\naction = \"\"\"\n[=]\n\\\"\"\"\n[=]\"\"\"\n",
                     "[default]\naction = '''\n[=]\n'''\n"] {
            XCTAssertFalse(diagnostics(text).contains { $0.contains("table header must start") }, text.debugDescription)
        }
    }

    func testTabsAndLineBreaksStayValid() {
        XCTAssertEqual(diagnostics("[proxy]\r\n\tallow_ports = [443]\t# tab\r\n\n"), [])
    }

    /// The lexer reads strings as TOML does: a NUL escape counts only where it is one (in a
    /// basic string or quoted key), and a line inside a multi-line string is neither a header
    /// nor a key, so the lines named after it stay right.
    func testTheLexerFollowsStringsAndComments() {
        let nul = "the config holds U+0000 (NUL), as a byte or as an escape: pinproxy cannot read past it"
        XCTAssertEqual(diagnostics("[proxy]\n# \\u0000 in a comment\nca_dir = 'a\\u0000'\n").filter { $0.contains("U+0000") }, [])
        XCTAssertEqual(diagnostics("[proxy]\n\"k\\u0000\" = 1\n"), ["c.toml:2: " + nul])
        let text = """
            [default]
            verify_command = ["/bin/true", \"\"\"
            [hosts."x.test"]
            \\\"\"\" still inside
            # not a comment
            \"\"\"]
            min_tls = "1.1"

            """
        XCTAssertEqual(diagnostics(text), [#"c.toml:7: default.min_tls = "1.1" is not one of "1.2", "1.3""#])
    }
}
