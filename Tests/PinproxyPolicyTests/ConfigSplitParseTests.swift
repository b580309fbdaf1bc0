import Foundation
import PinproxyCore
@testable import PinproxyPolicy
import XCTest

/// A large config whose second half holds only host tables is parsed in two parts, on two
/// threads (`ConfigSource.splitOffset`). Differential: for each text, loading it split (the
/// threshold lowered so that small texts split) and whole gives the same config, or the same
/// errors at the same lines; and the split is taken, or refused, where it should be.
final class ConfigSplitParseTests: XCTestCase {
    private static let now = Date(timeIntervalSince1970: 1_780_000_000)

    private static func pin(_ i: Int, _ j: Int) -> String {
        var bytes = [UInt8](repeating: 0, count: 32)
        for k in 0..<32 { bytes[k] = UInt8(truncatingIfNeeded: i &* 31 &+ j &* 7 &+ k &* 13) }
        return "sha256/" + Data(bytes).base64EncodedString()
    }

    private static func entry(_ i: Int, key: String? = nil) -> String {
        "[hosts.\"\(key ?? "h\(i).example.test")\"]\npin = \"public-key\"\npins = [\"\(pin(i, 0))\", \"\(pin(i, 1))\"]\n\n"
    }

    /// `count` entries, with `insert` placed before entry `at` (default: the middle).
    private static func hosts(_ count: Int, head: String = "", insert: String = "", at: Int? = nil, tail: String = "") -> String {
        var text = head
        for i in 0..<count {
            if i == (at ?? count / 2) { text += insert }
            text += entry(i)
        }
        return text + tail
    }

    /// The load's outcome as text: the config's canonical parts, or its diagnostics.
    private func outcome(_ text: String, split: Bool) -> String {
        do {
            let config = try ConfigLoader.load(text: text, path: "c.toml", directory: NSTemporaryDirectory(), now: Self.now,
                                               splitMinimumBytes: split ? 0 : Int.max)
            var out = "ok\n"
            for entry in [config.policies.defaultEntry] + config.policies.entries {
                out += "\(entry.name) \(entry.pattern.map { "\($0)" } ?? "-") line \(entry.line)\n"
                out += "  \(entry.fingerprint) \(entry.written.trust ?? []) \(entry.written.crls ?? [])\n"
            }
            out += config.warnings.map(\.description).joined(separator: "\n")
            return out
        } catch {
            return "error\n" + error.diagnostics.map(\.description).joined(separator: "\n")
        }
    }

    private func splitOffset(_ text: String) -> Int? {
        guard case .success(let source) = ConfigSource.read(text) else { return nil }
        return source.splitOffset(minimumBytes: 0)
    }

    /// Split and whole loads agree; the split is taken iff `splits`.
    private func assertSame(_ text: String, splits: Bool, loads: Bool? = nil, _ message: String,
                            file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(splitOffset(text) != nil, splits, "split taken: \(message)", file: file, line: line)
        let whole = outcome(text, split: false), split = outcome(text, split: true)
        XCTAssertEqual(split, whole, message, file: file, line: line)
        if let loads { XCTAssertEqual(whole.hasPrefix("ok"), loads, "\(message): \(whole.prefix(400))", file: file, line: line) }
    }

    func testPlainHostsSplitAndLoadTheSame() throws {
        let text = Self.hosts(200, head: "[proxy]\nlisten = [\"127.0.0.1:3128\"]\n\n[default]\naction = \"deny\"\n\n")
        let offset = try XCTUnwrap(splitOffset(text))
        XCTAssertTrue(text.utf8.dropFirst(offset).starts(with: "[hosts.\"".utf8))
        assertSame(text, splits: true, loads: true, "plain")
    }

    func testTheSplitIsNearTheMiddle() throws {
        let text = Self.hosts(400)
        let offset = try XCTUnwrap(splitOffset(text))
        XCTAssertGreaterThanOrEqual(offset, text.utf8.count / 2)
        XCTAssertLessThan(offset, text.utf8.count / 2 + 200)
    }

    func testSmallTextsAreNotSplitByDefault() throws {
        guard case .success(let source) = ConfigSource.read(Self.hosts(200)) else { return XCTFail("lexed") }
        XCTAssertNil(source.splitOffset())
    }

    func testSubTablesOfHosts() {
        // A sub-table (an unknown key: reported at its line) in either half.
        assertSame(Self.hosts(200, insert: "[hosts.\"a.example.test\".x]\ny = 1\n\n", at: 150), splits: true, loads: false, "sub-table, second half")
        assertSame(Self.hosts(200, insert: "[hosts.\"a.example.test\".x]\ny = 1\n\n", at: 30), splits: true, loads: false, "sub-table, first half")
        // A sub-table in the second half of a host whose table is in the first: no split.
        assertSame(Self.hosts(200, tail: "[hosts.\"h3.example.test\".x]\ny = 1\n"), splits: false, loads: false, "sub-table across halves")
        assertSame(Self.hosts(200, tail: "[hosts.\"h3.example.test\".x.y]\nz = 1\n"), splits: false, loads: false, "deeper sub-table across halves")
    }

    func testSyntaxErrorsAreTheWholeParses() {
        for broken in ["[hosts.\"bad.example.test\"]\npin = \n", "[hosts.\"bad.example.test\"]\npins = [\"a\" \"b\"]\n",
                       "[hosts.\"bad.example.test\"]\npin = \"public-key\" x\n", "[hosts.\"bad.example.test\"]\n= 1\n"] {
            assertSame(Self.hosts(200, insert: broken, at: 170), splits: true, loads: false, "second half: \(broken)")
            assertSame(Self.hosts(200, insert: broken, at: 20), splits: true, loads: false, "first half: \(broken)")
        }
        // Just before the split point, the last statement of the first half.
        let text = Self.hosts(200)
        let offset = splitOffset(text)!
        let middle = text.utf8.index(text.utf8.startIndex, offsetBy: offset)
        assertSame(String(text[..<middle]) + "x = \n" + String(text[middle...]), splits: true, loads: false, "at the split")
        assertSame(String(text[..<middle]) + "x = [1,\n" + String(text[middle...]), splits: false, loads: false, "array open at the split")
    }

    func testDuplicateHosts() {
        // The same key in both halves: TOML's error; no split.
        assertSame(Self.hosts(200, tail: Self.entry(7)), splits: false, loads: false, "same key across halves")
        // The same pattern, spelt differently, in both halves: the loader's error at both lines.
        assertSame(Self.hosts(200, tail: Self.entry(7, key: "H7.EXAMPLE.test")), splits: true, loads: false, "same pattern across halves")
        assertSame(Self.hosts(200, insert: Self.entry(170), at: 20), splits: false, loads: false, "same key, first half and second")
        assertSame(Self.hosts(200, insert: Self.entry(170), at: 190), splits: true, loads: false, "same key, twice in the second half")
    }

    func testOtherTablesAfterTheSplitDisableIt() {
        for table in ["[default]\naction = \"deny\"\n", "[proxy]\nlisten = [\"127.0.0.1:3128\"]\n", "[[hosts.\"x.example.test\"]]\npin = \"public-key\"\n",
                      "[hosts]\n", "[clients.\"a\"]\nuid = 1\n", "[[other]]\na = 1\n"] {
            assertSame(Self.hosts(200, tail: table), splits: false, "\(table) after the hosts")
        }
    }

    func testTheFirstHalfWritingHostsOtherwiseDisablesIt() {
        let pins = "pins = [\"\(Self.pin(1, 0))\", \"\(Self.pin(1, 1))\"]"
        for head in ["hosts.\"z.example.test\".pin = \"public-key\"\nhosts.\"z.example.test\".\(pins)\n",
                     "hosts = { \"z.example.test\" = { pin = \"public-key\", \(pins) } }\n",
                     "\"hosts\".\"z.example.test\" = { pin = \"public-key\", \(pins) }\n",
                     "[hosts]\n\"z.example.test\" = { pin = \"public-key\", \(pins) }\n",
                     "[hosts]\n"] {
            assertSame(Self.hosts(200, head: head), splits: false, "head: \(head)")
        }
        // The same host written inline at the top and with a header in the second half.
        assertSame(Self.hosts(200, head: "hosts.\"h190.example.test\".pin = \"public-key\"\n"), splits: false, loads: false, "inline and header")
    }

    func testHeaderLikeTextAroundTheSplit() {
        // In comments and strings, where the lexer knows they are no headers.
        let fake = "[default]\n[hosts.\"h5.example.test\"]\n[[x]]\n"
        let comments = fake.split(separator: "\n").map { "# \($0)\n" }.joined()
        assertSame(Self.hosts(200, insert: comments), splits: true, loads: true, "comments at the middle")
        for value in ["\"\"\"\n\(fake)\"\"\"", "'''\n\(fake)'''", "\"[default]\"", "[\n\"[default]\",\n# [proxy]\n]"] {
            let insert = "[hosts.\"s.example.test\"]\npin = \"public-key\"\npins = [\"\(Self.pin(9, 0))\", \"\(Self.pin(9, 1))\"]\nnote = \(value)\n\n"
            // An unknown key, reported at its line.
            assertSame(Self.hosts(200, insert: insert, at: 99), splits: true, loads: false, "string before the middle: \(value)")
            assertSame(Self.hosts(200, insert: insert, at: 101), splits: true, loads: false, "string after the middle: \(value)")
        }
    }

    func testWarningsAndFindingsKeepTheirLines() {
        // One pin: a warning per entry; a bad pin in the second half: an error at its line.
        let onePin = (0..<200).map { "[hosts.\"o\($0).example.test\"]\npin = \"public-key\"\npins = [\"\(Self.pin($0, 0))\"]\n" }.joined()
        assertSame(onePin, splits: true, loads: true, "one pin each")
        assertSame(Self.hosts(200, insert: "[hosts.\"bad.example.test\"]\npin = \"public-key\"\npins = [\"sha256/x\", \"sha256/y\"]\n", at: 180),
                   splits: true, loads: false, "bad pins in the second half")
        assertSame(Self.hosts(200, insert: "[hosts.\"bad pattern\"]\npin = \"public-key\"\n", at: 180), splits: true, loads: false, "bad pattern")
    }
}
