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

    /// A control character is found wherever it stands in a string, after printable and
    /// non-ASCII bytes and after an escape, in basic and literal strings alike.
    func testAControlCharacterInsideAStringIsRefusedAtItsLine() {
        let message = "the config holds the control character U+%@: TOML allows none but tab and line breaks (in a string, write an escape)"
        for (value, code) in [("\"/bin/abc\u{01}def\"", "0001"), ("'caf\u{E9}\u{1F}'", "001F"), ("\"a\\\"b\u{7F}c\"", "007F"),
                              ("'a\\\u{08}'", "0008")] {
            XCTAssertEqual(diagnostics("[proxy]\n\nca_dir = " + value + "\n"),
                           ["c.toml:3: " + message.replacingOccurrences(of: "%@", with: code)], value.debugDescription)
        }
        // Printable, tab, non-ASCII and escaped bytes pass.
        XCTAssertEqual(diagnostics("[proxy]\nca_dir = \"a\tb \u{E9}\\\"\\u0041 #[x]\"\n"), [])
    }

    /// A quoted key is taken as written up to its first escape, then escape by escape.
    func testQuotedKeysWithAndWithoutEscapesNameTheirEntries() throws {
        let text = "[hosts.\"plain.example\"]\n[hosts.\"ab\\u0063.example\"]\n[hosts.\"\\u0064ef.example\"]\n"
        let config = try ConfigLoader.load(text: text, path: "c.toml", directory: NSTemporaryDirectory())
        XCTAssertEqual(config.policies.entries.map { $0.pattern?.description }, ["plain.example", "abc.example", "def.example"])
        XCTAssertEqual(config.policies.entries.map(\.line), [1, 2, 3])
        XCTAssertEqual(diagnostics("[proxy]\n[hosts.\"ab\\u0063.example\"]\nmin_tls = \"1.1\"\n"),
                       [#"c.toml:3: hosts."abc.example".min_tls = "1.1" is not one of "1.2", "1.3""#])
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
