import Glibc
@testable import PinproxyCore
import XCTest

/// `IPAddress` reads and writes its text forms in Swift; they must be glibc's `inet_pton` and
/// `inet_ntop`, byte for byte, which these tests ask directly.
final class IPAddressTextTests: XCTestCase {
    /// Literals of every shape: each form, the `::` cases, embedded IPv4, and near misses.
    static let literals = [
        "0.0.0.0", "1.2.3.4", "255.255.255.255", "256.1.1.1", "01.2.3.4", "1.2.3", "1.2.3.4.", ".1.2.3.4", "1..2.3",
        "1.2.3.4.5", "", "1", "00.0.0.0", "0.0.0.00", "192.168.001.1",
        "::", "::1", "1::", ":", ":::", "1:::2", "::1::", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:7::8",
        "1::2:3:4:5:6:7", "::2:3:4:5:6:7:8", "1:2:3:4:5:6:7::", "1:2:3:4:5:6:7:", ":1:2:3:4:5:6:7", "12345::", "fFfF::aBcD",
        "::ffff:1.2.3.4", "::1.2.3.4", "1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:7:1.2.3.4", "::ffff:1.2.3", "::ffff:01.2.3.4",
        "::ffff:1.2.3.4:5", "1.2.3.4::", "::1234.1.1.1", "::ffff:256.1.1.1", "64:ff9b::192.0.2.1", "2001:db8::1",
        "2001:0db8:0000:0000:0000:0000:0000:0001", "fe80::1%eth0", "::g", " ::1", "::1 ", "0:0:0:0:0:0:0:0",
        // Names and near-names: no colon and more than digits and dots, refused before any copy.
        "example.test", "h1.example.test", "1.2.3.4a", "a1.2.3.4", "[1.2.3.4]", "\u{E9}.1.2.3",
    ]

    func testParsingIsTheCLibrarys() {
        for literal in Self.literals {
            check(literal)
        }
    }

    /// Where `IPAddress` is stricter than glibc on purpose: trailing space (glibc accepts it),
    /// and text after a NUL (C stops reading there).
    func testTextAfterTheAddressIsRefused() {
        for literal in ["1.2.3.4 ", "1.2.3.4\u{0}", "1.2.3.4\u{0}x", "::1\u{0}"] {
            XCTAssertNil(IPAddress(literal), literal.debugDescription)
        }
    }

    /// Random text from the characters an address is made of.
    func testParsingRandomTextIsTheCLibrarys() {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("0123456789abcdefABCDEF:.:::..g".utf8)
        for _ in 0..<200_000 {
            let length = Int.random(in: 0...24, using: &generator)
            check(String(decoding: (0..<length).map { _ in alphabet.randomElement(using: &generator) ?? 0 }, as: UTF8.self))
        }
    }

    /// Addresses with runs of zero groups in every place, and IPv4 ones.
    func testPrintingIsTheCLibrarys() {
        var generator = SystemRandomNumberGenerator()
        for mask in 0..<256 {
            for _ in 0..<40 {
                let bytes = (0..<8).flatMap { group -> [UInt8] in
                    guard mask & (1 << group) != 0 else { return [0, 0] }
                    let word = Bool.random(using: &generator) ? UInt16.random(in: 0...0xFFFF, using: &generator) : [1, 0xFFFF, 0x100].randomElement(using: &generator) ?? 1
                    return [UInt8(word >> 8), UInt8(word & 0xFF)]
                }
                compare(bytes)
            }
        }
        for _ in 0..<10_000 {
            compare((0..<4).map { _ in UInt8.random(in: 0...255, using: &generator) })
        }
    }

    private func check(_ literal: String, file: StaticString = #filePath, line: UInt = #line) {
        let ours = IPAddress(literal)?.bytes
        XCTAssertEqual(ours, cParse(literal), "'\(literal)'", file: file, line: line)
        if let ours { compare(ours, file: file, line: line) }
    }

    private func compare(_ bytes: [UInt8], file: StaticString = #filePath, line: UInt = #line) {
        guard let address = IPAddress(bytes: bytes) else { return XCTFail("\(bytes)", file: file, line: line) }
        XCTAssertEqual(address.description, cText(bytes), "\(bytes)", file: file, line: line)
    }

    /// `inet_pton` as `IPAddress` used it before: IPv6 when the text has a colon, else IPv4.
    private func cParse(_ literal: String) -> [UInt8]? {
        if literal.contains(":") {
            var v6 = in6_addr()
            return inet_pton(AF_INET6, literal, &v6) == 1 ? withUnsafeBytes(of: &v6) { Array($0) } : nil
        }
        var v4 = in_addr()
        return inet_pton(AF_INET, literal, &v4) == 1 ? withUnsafeBytes(of: &v4) { Array($0) } : nil
    }

    private func cText(_ bytes: [UInt8]) -> String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        bytes.withUnsafeBytes { raw in
            _ = inet_ntop(bytes.count == 16 ? AF_INET6 : AF_INET, raw.baseAddress, &buffer, socklen_t(buffer.count))
        }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
