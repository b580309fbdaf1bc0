import XCTest
import PinproxyPolicy
@testable import PinproxyProxy

/// The gRPC terms of an in-TLS refusal (`RefusalResponse.grpcFields`, `HTTP2Refusal.isGRPC`).
final class GRPCRefusalTests: XCTestCase {
    /// gRPC's Percent-Encoded: printable ASCII stays, `%` and every other byte is `%XX`.
    func testPercentEncoding() {
        XCTAssertEqual(RefusalResponse.percentEncoded("pin-mismatch (a: b)"), "pin-mismatch (a: b)")
        XCTAssertEqual(RefusalResponse.percentEncoded("100% é\n\u{7F}~"), "100%25 %C3%A9%0A%7F~")
        XCTAssertEqual(RefusalResponse.percentEncoded(""), "")
    }

    /// 14 (UNAVAILABLE) for exactly the upstream failures, 7 (PERMISSION_DENIED) for the rest.
    func testStatusFollowsTheReasonsHTTPStatus() {
        for reason in RefusalReason.allCases {
            let upstream: Set<RefusalReason> = [.dnsFailure, .upstreamUnreachable, .handshakeFailed, .upstreamTimeout]
            XCTAssertEqual(RefusalResponse.grpcStatus(reason.traits.httpStatus), upstream.contains(reason) ? 14 : 7, reason.rawValue)
        }
    }

    func testGRPCContentTypes() {
        for type in ["application/grpc", "application/grpc+proto", "Application/GRPC+json", "application/grpc; charset=utf-8"] {
            XCTAssertTrue(HTTP2Refusal.isGRPC(type), type)
        }
        for type in ["application/grpc-web", "application/grpcx", "text/plain", "application/json"] {
            XCTAssertFalse(HTTP2Refusal.isGRPC(type), type)
        }
    }

    /// The fields of a Trailers-Only response, in order, with a message that stays one
    /// printable line whatever the detail holds.
    func testTrailersOnlyFields() {
        let page = RefusalResponse.Page(status: 502, reason: .upstreamUnreachable, detail: "cannot connect\nto 192.0.2.1: refused",
                                        proxyStatus: "pinproxy; error=destination_unavailable", host: "api.test", port: 443, entry: nil, configPath: "/etc/pinproxy/pinproxy.toml",
                                        presented: [], pinKind: nil, pins: [])
        let fields = RefusalResponse.grpcFields(page)
        XCTAssertEqual(fields.map(\.name), [":status", "content-type", "grpc-status", "grpc-message", "pinproxy-refusal", "proxy-status"])
        XCTAssertEqual(Array(fields.map(\.value)[0...2]), ["200", "application/grpc", "14"])
        XCTAssertEqual(fields[3].value, "pinproxy refused api.test:443: upstream-unreachable (cannot connect?to 192.0.2.1: refused)")
    }
}
