import Foundation
import PinproxyCore
import XCTest

/// The text helpers that stand in for Foundation's formatting give what Foundation gave.
final class TextFormattingTests: XCTestCase {
    func testFixedPlacesMatchPrintf() {
        for value in [0, 0.0004, 0.0005, 0.001, 0.1234, 1, 2.5, 12.3456, 59.9999, 1234.5678, 86_400.25] {
            XCTAssertEqual(value.fixed(places: 3), String(format: "%.3f", value), "\(value)")
        }
    }

    func testSecondsReadAsWritten() {
        XCTAssertEqual(5.0.secondsText, "5")
        XCTAssertEqual(0.25.secondsText, "0.25")
        XCTAssertEqual(30.0.secondsText, String(format: "%g", 30.0))
        XCTAssertEqual(0.5.secondsText, String(format: "%g", 0.5))
    }

    func testHexAndDecimalArePadded() {
        XCTAssertEqual(UInt8(0x0a).hex(digits: 2), "0a")
        XCTAssertEqual(UInt32(0x1b).hex(digits: 4, uppercase: true), "001B")
        XCTAssertEqual(UInt32(0x1F600).hex(digits: 4), "1f600")
        XCTAssertEqual(7.decimal(digits: 4), "0007")
        XCTAssertEqual(12345.decimal(digits: 4), "12345")
    }

    func testTrimmingAndPadding() {
        XCTAssertEqual(" \t 12\n".trimmingWhitespace(), "12")
        XCTAssertEqual("\n\n".trimmingWhitespace(), "")
        XCTAssertEqual("[::1]".trimmingBrackets(), "::1")
        XCTAssertEqual("pinproxy\n".trimming(while: \.isNewline), "pinproxy")
        XCTAssertEqual("ab".padded(to: 4), "ab  ")
        XCTAssertEqual("abcdef".padded(to: 4), "abcdef")
    }

    func testReplacingEachScalarAtOnce() {
        XCTAssertEqual(#"a\b"c"#.replacingEach(["\\": "\\\\", "\"": "\\\""]), #"a\\b\"c"#)
        XCTAssertEqual("-\\".replacingEach(["\\": "\\e", "-": "\\-"]), "\\-\\e")
    }

    func testJSONValuesRoundTrip() throws {
        let text = #"{"a":[1,2.5,true,null,"x/y"],"b":{"c":-3}}"#
        let value = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
        XCTAssertEqual(value["a"]?.array, [.integer(1), .number(2.5), .bool(true), .null, .string("x/y")])
        XCTAssertEqual(value["b"]?["c"]?.scalarText, "-3")
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        XCTAssertEqual(String(decoding: try encoder.encode(value), as: UTF8.self), text)
    }
}
