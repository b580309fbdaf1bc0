import PinproxyPolicy
import XCTest
@testable import PinproxyProxy

/// A refusal on the CONNECT quotes server text (certificate subjects) in its body: every byte
/// of the answer is printable ASCII (CRLF aside) and the detail is bounded.
final class RefusalResponseTests: XCTestCase {
    func testConnectRefusalIsPrintableASCIIAndBounded() throws {
        let detail = "depth 0: CN=evil\u{1B}[31m\u{202E}X\nY,O=M\u{FC}ller <b>" + String(repeating: "x", count: 5_000)
        let answer = RefusalResponse.connectResponse(status: 403, reason: .untrustedChain,
                                                     proxyStatus: ProxyStatus.value(reason: .untrustedChain, detail: detail),
                                                     target: ("api.test\u{7F}", 443), detail: detail)
        let text = String(decoding: answer, as: UTF8.self)
        let end = try XCTUnwrap(text.range(of: "\r\n\r\n"))
        let (head, body) = (text[..<end.lowerBound], text[end.upperBound...])
        XCTAssertTrue(head.hasPrefix("HTTP/1.1 403 pinproxy: untrusted-chain for api.test?\r\n"), String(head))
        XCTAssertTrue(head.contains("\r\nContent-Length: \(body.utf8.count)\r\n"), String(head))
        XCTAssertTrue(head.contains("\r\nProxy-Status: pinproxy; error=tls_certificate_error; details=\"untrusted-chain: depth 0: CN=evil?[31m?X?Y,O=M?ller <b>xxx"), String(head))
        XCTAssertEqual(body.split(separator: "\n", omittingEmptySubsequences: false).count, 3, String(body))
        XCTAssertTrue(body.hasPrefix("pinproxy refused api.test?:443: untrusted-chain\ndepth 0: CN=evil?[31m?X?Y,O=M?ller <b>xxx"), String(body))
        XCTAssertTrue(body.hasSuffix("x...\n"), String(body.suffix(20)))
        XCTAssertLessThanOrEqual(body.utf8.count, RefusalResponse.maximumDetailLength + 100)
        let outside = answer.filter { !(0x20...0x7E).contains($0) && $0 != UInt8(ascii: "\r") && $0 != UInt8(ascii: "\n") }
        XCTAssertEqual(outside, [])
    }

    func testARefusalWithoutATargetSaysTheRequest() {
        let answer = RefusalResponse.connectResponse(status: 400, reason: .badRequest, proxyStatus: "pinproxy", target: nil, detail: "no host")
        XCTAssertTrue(String(decoding: answer, as: UTF8.self).hasSuffix("\r\n\r\npinproxy refused the request: bad-request\nno host\n"))
    }
}
