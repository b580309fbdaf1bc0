import Foundation
import XCTest
@testable import PinproxyProxy

/// The log line writers build bytes by hand (`LineFormat`): these check them against
/// Foundation's JSON parser, including the edges hand-written formatting gets wrong (escaping).
/// The line's time (`rfc3339Milliseconds`): `RFC3339Tests`.
final class LineFormatTests: XCTestCase {
    private let awkward: [(String, String)] = [
        ("plain", "api.test"),
        ("empty", ""),
        ("spaced", "a b"),
        ("quoted", #"say "hi""#),
        ("backslash", #"C:\path"#),
        ("equals", "k=v"),
        ("breaks", "one\ntwo\rthree\tfour"),
        ("control", "bell\u{07}nul\u{00}"),
        ("separators", "line\u{2028}para\u{2029}next\u{85}"),
        ("bidi", "abc\u{202E}fed"),
        ("utf8", "Zürich 東京"),
    ]

    func testJSONLinesParseBackToTheirValues() throws {
        let line = LineFormat.json(awkward)
        XCTAssertFalse(line.contains("\n"), line)
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String])
        XCTAssertEqual(object.count, awkward.count)
        for (key, value) in awkward { XCTAssertEqual(object[key], value, key) }
        XCTAssertTrue(line.hasPrefix(#"{"plain":"api.test","empty":"","#), line)
    }

    func testLogfmtQuotesWhatCouldSplitAField() {
        let line = LineFormat.logfmt(awkward)
        XCTAssertFalse(line.contains("\n") || line.contains("\r") || line.contains("\u{2028}"), line)
        let expected = [
            "plain=api.test",
            #"empty="""#,
            #"spaced="a b""#,
            #"quoted="say \"hi\"""#,
            #"backslash="C:\\path""#,
            #"equals="k=v""#,
            #"breaks="one\ntwo\rthree\tfour""#,
            #"control="bell\u0007nul\u0000""#,
            #"separators="line\u2028para\u2029next\u0085""#,
            #"bidi="abc\u202efed""#,
            #"utf8="Zürich 東京""#,
        ].joined(separator: " ")
        XCTAssertEqual(line, expected)
    }

    func testJSONListsAndCertificatesAreArrays() throws {
        let certificates: [(subject: String, spki: String)] = [(#"CN=x sha256/AAAA | O="y""#, "sha256/BBBB"), ("CN=CA", "sha256/CCCC")]
        let line = LineFormat.json([("event", .text("connection")), ("verified_pins", .list(["sha256/BBBB", "sha256/CCCC"])),
                                    ("verified_chain", .certificates(certificates)), ("none", .list([]))])
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        XCTAssertEqual(object["verified_pins"] as? [String], ["sha256/BBBB", "sha256/CCCC"])
        XCTAssertEqual(object["none"] as? [String], [])
        let chain = try XCTUnwrap(object["verified_chain"] as? [[String: String]])
        XCTAssertEqual(chain.map { $0["subject"] }, certificates.map(\.subject))
        XCTAssertEqual(chain.map { $0["spki"] }, certificates.map(\.spki))
        XCTAssertEqual(chain.map(\.count), [2, 2])
    }

    func testLogfmtJoinsListsAndCertificates() {
        let line = LineFormat.logfmt([("chain", LineValue.certificates([("CN=a", "sha256/A="), ("CN=b", "sha256/B=")])),
                                      ("verified_pins", .list(["sha256/A=", "sha256/B="]))])
        XCTAssertEqual(line, #"chain="CN=a sha256/A= | CN=b sha256/B=" verified_pins="sha256/A=,sha256/B=""#)
    }

    func testTheByteAndStringEscapersAgree() {
        for (_, value) in awkward {
            var bytes: [UInt8] = []
            LineFormat.appendEscaped(value, to: &bytes)
            var text = ""
            LineFormat.appendEscaped(value, to: &text)
            XCTAssertEqual(String(decoding: bytes, as: UTF8.self), text, value)
        }
    }

    func testJSONWritesNumbersAsNumbersAndLeavesAbsentFieldsOut() throws {
        let line = LineFormat.json([("event", "tunnel-closed"), ("client", "-"), ("port", "18443"), ("status", "403"),
                                    ("alpn", "-"), ("bytes_up", "0"), ("duration", "0.003"), ("entries", "12"),
                                    ("detail", "-1"), ("host", "443")])
        XCTAssertEqual(line, #"{"event":"tunnel-closed","port":18443,"status":403,"bytes_up":0,"duration":0.003,"entries":12,"detail":"-1","host":"443"}"#)
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        XCTAssertNil(object["client"])
        XCTAssertNil(object["alpn"])
        XCTAssertEqual(LineFormat.logfmt([("client", "-"), ("port", "18443")]), "client=- port=18443", "logfmt keeps -")
    }

    func testOnlyJSONNumbersAreWrittenBare() {
        for text in ["0", "7", "-3", "18443", "9223372036854775807"] {
            XCTAssertTrue(LineFormat.isJSONNumber(text, integer: true), text)
        }
        for text in ["", "-", "007", "1.5", "1e3", "+1", "0x10", " 1", "1 ", "NaN"] {
            XCTAssertFalse(LineFormat.isJSONNumber(text, integer: true), text)
        }
        for text in ["0.003", "12.500", "-0.5", "1e3", "2.5E-4", "0"] {
            XCTAssertTrue(LineFormat.isJSONNumber(text, integer: false), text)
        }
        for text in ["1.", ".5", "01.5", "1e", "inf", "0.003s"] {
            XCTAssertFalse(LineFormat.isJSONNumber(text, integer: false), text)
        }
        // A value that is not a number stays a string rather than breaking the line.
        XCTAssertEqual(LineFormat.json([("port", "80a")]), #"{"port":"80a"}"#)
    }
}
