import XCTest
import PinproxyPolicy
@testable import PinproxyProxy

/// `Proxy-Status` values are one RFC 8941 item whatever the detail holds: checked with a parser
/// of the item grammar (below) written from RFC 8941 §3.3 and §4.2, not from the writer.
final class ProxyStatusTests: XCTestCase {
    func testEveryReasonGivesAnItemNamingItsErrorType() throws {
        for reason in RefusalReason.allCases {
            let item = try SFItem.parse(ProxyStatus.value(reason: reason, detail: "a short detail"))
            XCTAssertEqual(item.bare, .token("pinproxy"))
            XCTAssertEqual(item.parameters.map(\.key), ["error", "details"])
            XCTAssertEqual(item.parameters[0].value, .token(reason.traits.proxyStatusError.rawValue))
            XCTAssertEqual(item.parameters[1].value, .string("\(reason.rawValue): a short detail"))
        }
        let verdict = try SFItem.parse(ProxyStatus.value(reason: .pinMismatch, detail: "pin-mismatch: none matches"))
        XCTAssertEqual(verdict.parameters[1].value, .string("pin-mismatch: none matches"), "the reason is said once")
        let timeout = try SFItem.parse(ProxyStatus.value(reason: .dnsFailure, detail: "no answer", error: .dnsTimeout))
        XCTAssertEqual(timeout.parameters[0].value, .token("dns_timeout"))
    }

    /// Quotes, backslashes, controls, non-ASCII (a bidi override, emoji, combining marks) and
    /// length: the value stays an item, at most 200 bytes, and says what it can of the detail.
    func testHostileDetailsStayOneBoundedItem() throws {
        let details = [
            #"CN="quoted" \ back\slash"#, "line\r\nbreak\u{0}nul\u{7F}del", "caf\u{E9} \u{202E}gnp.exe \u{1F600} e\u{301}",
            String(repeating: "\\", count: 300), String(repeating: "\"", count: 301), String(repeating: "x", count: 5_000),
            String(repeating: "é", count: 500), "", String(repeating: "a", count: 150) + String(repeating: "\\", count: 50),
        ]
        for detail in details {
            for offset in 0..<3 {
                let shifted = String(repeating: "y", count: offset) + detail
                let value = ProxyStatus.value(reason: .pinMismatch, detail: shifted)
                XCTAssertLessThanOrEqual(value.utf8.count, ProxyStatus.maximumBytes, value)
                XCTAssertTrue(value.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F }, value)
                let item = try SFItem.parse(value)
                guard case .string(let text) = item.parameters.last?.value else { return XCTFail(value) }
                let expected = "pin-mismatch" + (shifted.isEmpty ? "" : ": ") + String(shifted.unicodeScalars.map {
                    $0.value >= 0x20 && $0.value < 0x7F ? Character($0) : "?"
                })
                if text.hasSuffix("...") && text.count < expected.count {
                    XCTAssertTrue(expected.hasPrefix(text.dropLast(3)), "\(text) is not a prefix of the detail")
                    XCTAssertGreaterThan(value.utf8.count, ProxyStatus.maximumBytes - 5, "cut shorter than it had to be")
                } else {
                    XCTAssertEqual(text, expected)
                }
            }
        }
    }
}

/// An RFC 8941 Item with the bare items Proxy-Status uses (token, string, boolean, integer).
struct SFItem {
    enum Bare: Equatable {
        case token(String), string(String), boolean(Bool), integer(Int)
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    let bare: Bare
    let parameters: [(key: String, value: Bare)]

    /// Parses a whole field value (RFC 8941 §4.2: leading and trailing spaces are discarded).
    static func parse(_ text: String) throws -> SFItem {
        var input = Array(text.utf8)[...]
        while input.first == 0x20 { input.removeFirst() }
        while input.last == 0x20 { input.removeLast() }
        let bare = try bareItem(&input)
        var parameters: [(String, Bare)] = []
        while input.first == UInt8(ascii: ";") {
            input.removeFirst()
            while input.first == 0x20 { input.removeFirst() }
            let key = try self.key(&input)
            var value = Bare.boolean(true)
            if input.first == UInt8(ascii: "=") {
                input.removeFirst()
                value = try bareItem(&input)
            }
            parameters.removeAll { $0.0 == key }
            parameters.append((key, value))
        }
        guard input.isEmpty else { throw Failure(description: "trailing characters in \(text)") }
        return SFItem(bare: bare, parameters: parameters)
    }

    private static func isAlpha(_ c: UInt8) -> Bool { (0x41...0x5A).contains(c) || (0x61...0x7A).contains(c) }
    private static func isDigit(_ c: UInt8) -> Bool { (0x30...0x39).contains(c) }
    /// tchar (RFC 9110 §5.6.2).
    private static func isTChar(_ c: UInt8) -> Bool {
        isAlpha(c) || isDigit(c) || Array("!#$%&'*+-.^_`|~".utf8).contains(c)
    }

    private static func key(_ input: inout ArraySlice<UInt8>) throws -> String {
        guard let first = input.first, (0x61...0x7A).contains(first) || first == UInt8(ascii: "*") else {
            throw Failure(description: "a key must start with a lower-case letter or *")
        }
        var key: [UInt8] = []
        while let c = input.first, (0x61...0x7A).contains(c) || isDigit(c) || Array("_-.*".utf8).contains(c) {
            key.append(c)
            input.removeFirst()
        }
        return String(decoding: key, as: UTF8.self)
    }

    private static func bareItem(_ input: inout ArraySlice<UInt8>) throws -> Bare {
        guard let first = input.first else { throw Failure(description: "missing bare item") }
        if first == UInt8(ascii: "\"") {
            input.removeFirst()
            var text: [UInt8] = []
            while let c = input.popFirst() {
                switch c {
                case UInt8(ascii: "\\"):
                    guard let next = input.popFirst(), next == UInt8(ascii: "\"") || next == UInt8(ascii: "\\") else {
                        throw Failure(description: "a backslash escapes only a quote or a backslash")
                    }
                    text.append(next)
                case UInt8(ascii: "\""):
                    return .string(String(decoding: text, as: UTF8.self))
                case 0x20...0x7E:
                    text.append(c)
                default:
                    throw Failure(description: "byte \(c) in a string")
                }
            }
            throw Failure(description: "unterminated string")
        }
        if first == UInt8(ascii: "?") {
            input.removeFirst()
            switch input.popFirst() {
            case UInt8(ascii: "1"): return .boolean(true)
            case UInt8(ascii: "0"): return .boolean(false)
            default: throw Failure(description: "bad boolean")
            }
        }
        if isDigit(first) || first == UInt8(ascii: "-") {
            var digits: [UInt8] = [first]
            input.removeFirst()
            while let c = input.first, isDigit(c) { digits.append(c); input.removeFirst() }
            guard let value = Int(String(decoding: digits, as: UTF8.self)), digits.count <= 16 else { throw Failure(description: "bad integer") }
            return .integer(value)
        }
        guard isAlpha(first) || first == UInt8(ascii: "*") else { throw Failure(description: "no bare item starts with \(first)") }
        var token: [UInt8] = []
        while let c = input.first, isTChar(c) || c == UInt8(ascii: ":") || c == UInt8(ascii: "/") {
            token.append(c)
            input.removeFirst()
        }
        return .token(String(decoding: token, as: UTF8.self))
    }
}
