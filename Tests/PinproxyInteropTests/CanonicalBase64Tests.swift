import Foundation
import PinproxyInterop
import XCTest

/// `CanonicalBase64` against Foundation's encoder: every length decodes back, and any text
/// that is not exactly the canonical encoding is refused.
final class CanonicalBase64Tests: XCTestCase {
    func testEveryLengthDecodesBackToItsBytes() {
        var generator = SystemRandomNumberGenerator()
        for length in 1...100 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let text = Data(bytes).base64EncodedString()
            XCTAssertEqual(CanonicalBase64.decode(Array(text.utf8)[...]), bytes, text)
        }
        // Every byte value, so every character of the alphabet.
        let all = (0...255).map(UInt8.init)
        XCTAssertEqual(CanonicalBase64.decode(Array(Data(all).base64EncodedString().utf8)[...]), all)
    }

    func testTextThatIsNotTheCanonicalEncodingIsRefused() {
        let canonical = Data(repeating: 0xFB, count: 32).base64EncodedString()  // 44 characters, one `=`
        var refused = ["", "=", "====", "A", "AB", "ABC", "AB=C", "A===", "AA=A"]
        refused.append(canonical.replacingOccurrences(of: "=", with: ""))  // unpadded
        refused.append(canonical.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_"))  // URL-safe
        refused += [" ", "\n", "\r\n", "\t"].flatMap { [$0 + canonical, canonical + $0, String(canonical.prefix(20)) + $0 + canonical.dropFirst(20)] }
        refused.append(String(canonical.prefix(20)) + "=" + canonical.dropFirst(21))
        refused.append(String(canonical.dropLast(2)) + "==")
        // Stray bits past the data: `…A=` is canonical for 32 zero bytes, `…B=` is not; `…AA==` for 1 byte, `…AB==` not.
        refused.append(String(repeating: "A", count: 42) + "B=")
        refused.append("AB==")
        refused.append(String(repeating: "A", count: 4097 / 4 * 4 + 4))  // over 4 KiB
        XCTAssertNotNil(CanonicalBase64.decode(Array(canonical.utf8)[...]))
        XCTAssertEqual(CanonicalBase64.decode(Array((String(repeating: "A", count: 42) + "A=").utf8)[...]), [UInt8](repeating: 0, count: 31) + [0])
        XCTAssertEqual(CanonicalBase64.decode(Array("AA==".utf8)[...]), [0])
        for text in refused {
            XCTAssertNil(CanonicalBase64.decode(Array(text.utf8)[...]), "\(text.debugDescription) must be refused")
        }
    }
}
