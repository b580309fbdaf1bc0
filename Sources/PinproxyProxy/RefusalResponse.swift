import PinproxyCore
import PinproxyInterop
import PinproxyPolicy

/// What a refused client gets. The status line is built so that clients which print only the
/// CONNECT answer's reason phrase (Python's http.client — so urllib, requests and pip — and
/// wget) say what happened: `HTTP/1.1 403 pinproxy: pin-mismatch for api.example.com`. Every
/// byte of it is printable ASCII, and bounded: the detail holds server text (certificate
/// subjects).
enum RefusalResponse {
    /// The longest host name the phrase carries; a longer one ends in `...`.
    static let maximumHostLength = 100
    /// The longest detail a body carries, in characters; a longer one ends in `...`.
    static let maximumDetailLength = 2_000

    /// The whole refusal on the CONNECT (`refusal = "connect"`, or a request without a host):
    /// the status line, `Pinproxy-Refusal`, and a body naming the reason, the target (when the
    /// request named one) and the detail.
    static func connectResponse(status: Int, reason: RefusalReason, proxyStatus: String, target: (host: String, port: UInt16)?,
                                detail: String) -> [UInt8] {
        let named = target.map { "\(sanitizedHost($0.host)):\($0.port)" } ?? "the request"
        let body = "pinproxy refused \(named): \(reason.rawValue)\n\(printable(detail, limit: maximumDetailLength))\n"
        return response(status: status, reason: reason, proxyStatus: proxyStatus, host: target?.host, body: body, includeBody: true)
    }

    /// The status line, `Pinproxy-Refusal`, `Proxy-Status` (`ProxyStatus.value`), the headers of
    /// a text body that closes the connection, and `body` unless `includeBody` is false (for HEAD).
    static func response(status: Int, reason: RefusalReason, proxyStatus: String, host: String?, body: String,
                         includeBody: Bool) -> [UInt8] {
        let body = Array(body.utf8)
        var head = statusLine(status: status, reason: reason, host: host) + "\r\n"
        head += "Pinproxy-Refusal: \(reason.rawValue)\r\nProxy-Status: \(proxyStatus)\r\n"
        head += "Content-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n"
        head += "Content-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        return Array(head.utf8) + (includeBody ? body : [])
    }

    /// `HTTP/1.1 STATUS pinproxy: REASON[ for HOST]`, without the CRLF. One line of printable
    /// ASCII at most 160 bytes long, whatever the host holds.
    static func statusLine(status: Int, reason: RefusalReason, host: String?) -> String {
        var phrase = "pinproxy: \(reason.rawValue)"
        if let host, case let shown = sanitizedHost(host), !shown.isEmpty {
            phrase += " for \(shown)"
        }
        return "HTTP/1.1 \(status) \(phrase)"
    }

    /// HOST with every byte outside the characters of host names and IP literals (letters,
    /// digits, `.-_:[]`) replaced by `?`, and cut to `maximumHostLength`.
    static func sanitizedHost(_ host: String) -> String {
        var bytes = host.utf8.map { byte -> UInt8 in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "-"),
                 UInt8(ascii: "_"), UInt8(ascii: ":"), UInt8(ascii: "["), UInt8(ascii: "]"):
                return byte
            default:
                return UInt8(ascii: "?")
            }
        }
        if bytes.count > maximumHostLength {
            bytes = Array(bytes.prefix(maximumHostLength - 3)) + Array("...".utf8)
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

extension RefusalResponse {
    /// What the `refusal = "in-tls"` page says: plain values, so that building it is pure.
    struct Page {
        let status: Int
        let reason: RefusalReason
        let detail: String
        /// The `Proxy-Status` header's value.
        let proxyStatus: String
        let host: String
        let port: UInt16
        /// `hosts."api.example.com"`, or `default`; nil when no entry was looked up.
        let entry: String?
        let configPath: String
        /// Each presented certificate: subject, public-key pin, certificate pin.
        let presented: [(subject: String, publicKey: String, certificate: String)]
        /// The entry's pin kind (`public-key`, `certificate`) and pins, when it pins.
        let pinKind: String?
        let pins: [String]
        /// Whether the client came through the egress lock (the transparent listener), not CONNECT.
        var captured = false
    }

    /// At most this many presented certificates are listed, each subject at most this long.
    static let listedCertificates = 8
    static let maximumSubjectLength = 300

    /// The whole HTTP/1.1 response (head, and the body unless `includeBody` is false, for
    /// HEAD): the refusal's status line, `Pinproxy-Refusal`, and a text body that says what was
    /// presented, which pins were expected, and how to update the policy; `Proxy-Status` too.
    static func inTLSResponse(_ page: Page, includeBody: Bool = true) -> [UInt8] {
        response(status: page.status, reason: page.reason, proxyStatus: page.proxyStatus, host: page.host, body: inTLSBody(page),
                 includeBody: includeBody)
    }

    /// The HTTP/2 response fields of the page (`inTLSBody`, `contentLength` bytes): the
    /// refusal's status, `pinproxy-refusal`, `proxy-status` and the HTTP/1.1 answer's other
    /// fields (HTTP/2 has no reason phrase and no `Connection`).
    static func http2Fields(_ page: Page, contentLength: Int) -> [HTTP2ServerSession.Field] {
        [.init(":status", String(page.status)), .init("pinproxy-refusal", page.reason.rawValue), .init("proxy-status", page.proxyStatus),
         .init("content-type", "text/plain; charset=utf-8"), .init("x-content-type-options", "nosniff"),
         .init("cache-control", "no-store"), .init("content-length", String(contentLength))]
    }

    /// A gRPC Trailers-Only response (one header block that ends the stream): `:status 200`,
    /// `content-type: application/grpc`, the `grpc-status` of `grpcStatus`, and the page's first
    /// two lines, percent-encoded, as `grpc-message`, which gRPC clients print; and
    /// `pinproxy-refusal` and `proxy-status` as on every refusal.
    static func grpcFields(_ page: Page) -> [HTTP2ServerSession.Field] {
        [.init(":status", "200"), .init("content-type", "application/grpc"), .init("grpc-status", String(grpcStatus(page.status))),
         .init("grpc-message", percentEncoded(grpcMessage(page))), .init("pinproxy-refusal", page.reason.rawValue),
         .init("proxy-status", page.proxyStatus)]
    }

    /// gRPC's code for a refusal of HTTP status `status`: 14 (UNAVAILABLE) for the upstream
    /// failures (502, 504), 7 (PERMISSION_DENIED) for the policy and certificate refusals.
    static func grpcStatus(_ status: Int) -> Int {
        status >= 500 ? 14 : 7
    }

    /// `pinproxy refused HOST:PORT: REASON (DETAIL)`, the detail cut to `maximumGRPCDetail` characters.
    static func grpcMessage(_ page: Page) -> String {
        "pinproxy refused \(sanitizedHost(page.host)):\(page.port): \(page.reason.rawValue) (\(printable(page.detail, limit: maximumGRPCDetail)))"
    }

    static let maximumGRPCDetail = 1_000

    /// TEXT as gRPC's Percent-Encoded: every UTF-8 byte outside printable ASCII (0x20 to 0x7E),
    /// and `%` itself, as `%XX`.
    static func percentEncoded(_ text: String) -> String {
        var result = ""
        for byte in text.utf8 {
            if byte >= 0x20 && byte <= 0x7E && byte != UInt8(ascii: "%") {
                result.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                let hex = String(byte, radix: 16, uppercase: true)
                result += "%" + (hex.count == 1 ? "0" + hex : hex)
            }
        }
        return result
    }

    static func inTLSBody(_ page: Page) -> String {
        let host = sanitizedHost(page.host)
        let config = printable(page.configPath, limit: 300)
        var lines = [
            "pinproxy refused \(host):\(page.port): \(page.reason.rawValue)",
            printable(page.detail, limit: maximumDetailLength),
            "",
            "This answer comes from pinproxy, not from \(host) (\(page.captured ? "pinproxy's egress lock sent this connection to it" : "pinproxy's refusal = \"in-tls\" mode")): nothing",
            "of this request went to \(host), and nothing from \(host) reaches this client.",
        ]
        if !page.presented.isEmpty {
            lines += ["", "Presented by \(host):\(page.port):"]
            for (index, certificate) in page.presented.prefix(listedCertificates).enumerated() {
                lines.append("  [\(index)] \(printable(certificate.subject, limit: maximumSubjectLength))")
                lines.append("      public-key: \(certificate.publicKey)")
                lines.append("      certificate: \(certificate.certificate)")
            }
            if page.presented.count > listedCertificates {
                lines.append("  ... and \(page.presented.count - listedCertificates) more")
            }
        }
        if let pinKind = page.pinKind, !page.pins.isEmpty {
            lines += ["", "Expected (\(printable(page.entry ?? "the entry", limit: 300)), \(pinKind) pins, any one of):"]
            lines += page.pins.map { "  \($0)" }
        }
        if let hint = hint(page, host: host, config: config) {
            lines += ["", "To change the policy: " + hint]
        }
        lines += ["", "The pinproxy log has the same decision (event=connection outcome=refused host=\(host))."]
        return lines.joined(separator: "\n") + "\n"
    }

    /// What an operator can do about the page's reason (`RefusalReason.advice`).
    static func hint(_ page: Page, host: String, config: String) -> String? {
        page.reason.advice(host: host, port: page.port, entry: printable(page.entry ?? "hosts.\"\(host)\"", limit: 300), config: config,
                           pinKind: page.pinKind)
    }

    /// TEXT as printable ASCII: every other character (control characters such as terminal
    /// escapes, bidi overrides, line separators, any non-ASCII letter) replaced by `?`, cut to
    /// LIMIT characters: what a server puts in its certificate cannot restyle or disguise a
    /// refusal, nor make it long.
    static func printable(_ text: String, limit: Int) -> String {
        var bytes: [UInt8] = []
        for scalar in text.unicodeScalars.prefix(limit) {
            bytes.append((0x20...0x7E).contains(scalar.value) ? UInt8(scalar.value) : UInt8(ascii: "?"))
        }
        return String(decoding: bytes, as: UTF8.self) + (text.unicodeScalars.count > limit ? "..." : "")
    }
}
