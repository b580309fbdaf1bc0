import PinproxyCore
import PinproxyInterop
import PinproxyPolicy

/// A parsed `CONNECT host:port HTTP/1.1` request line, or why it is refused.
public enum RequestLine: Equatable, Sendable {
    case connect(TargetHost, UInt16)
    /// A well-formed request with another method: plain HTTP carries no chain to pin.
    case cleartext(method: String)
    case bad(String)

    /// Limits on the request head.
    public static let maxRequestLineBytes = 8 * 1024
    public static let maxHeaderBytes = 32 * 1024
    public static let maxHeaderLines = 100

    /// Parses a request line: exactly `METHOD SP TARGET SP HTTP/x.y`. Methods are
    /// case-sensitive (RFC 9110), so only `CONNECT` is CONNECT; its version must be HTTP/1.1
    /// or HTTP/1.0.
    public init(parsing line: String) {
        let parts = line.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty,
              parts[0].utf8.allSatisfy(RequestLine.isTokenByte) else {
            self = .bad("the request line is not METHOD TARGET HTTP-VERSION")
            return
        }
        let version = parts[2]
        guard version.hasPrefix("HTTP/"), version.count == 8 else {
            self = .bad("\"\(version)\" is not an HTTP version")
            return
        }
        guard parts[0] == "CONNECT" else {
            self = .cleartext(method: String(parts[0]))
            return
        }
        // HTTP/1.0 is accepted too: Python before 3.12 (http.client, so urllib, requests and
        // pip) sends its CONNECT as HTTP/1.0.
        guard version == "HTTP/1.1" || version == "HTTP/1.0" else {
            self = .bad("CONNECT must use HTTP/1.1 (or HTTP/1.0), not \(version)")
            return
        }
        guard let (host, port) = RequestLine.parseAuthority(String(parts[1])) else {
            self = .bad("\"\(parts[1])\" is not host:port with a valid host name or IP literal (IPv6 in brackets) and a port from 1 to 65535")
            return
        }
        self = .connect(host, port)
    }

    /// `name:port`, `1.2.3.4:port` or `[v6]:port`.
    static func parseAuthority(_ authority: String) -> (TargetHost, UInt16)? {
        guard let colon = authority.lastIndex(of: ":") else { return nil }
        let portText = authority[authority.index(after: colon)...]
        guard !portText.isEmpty, portText.count <= 5, portText.allSatisfy({ $0.isASCII && $0.isNumber }),
              let port = UInt16(portText), port > 0 else { return nil }
        let hostText = String(authority[..<colon])
        if hostText.hasPrefix("[") {
            // Brackets hold IPv6 only (an IPv4-mapped one then stands for its IPv4 address).
            guard hostText.hasSuffix("]"), let address = IPAddress(hostText), address.isIPv6,
                  let host = TargetHost(hostText) else { return nil }
            return (host, port)
        }
        guard !hostText.contains(":"), let host = TargetHost(hostText) else { return nil }
        return (host, port)
    }

    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return "!#$%&'*+-.^_`|~".utf8.contains(byte)
        }
    }
}

extension ClientConnection {
    /// Parse CONNECT: reads the request head within its limits; on the blank line, goes on to
    /// identify the client and admit the request.
    func readRequest() {
        while case .readingRequest(var head, let timer) = state {
            let limit = head.target == nil ? RequestLine.maxRequestLineBytes : RequestLine.maxHeaderBytes - head.headerBytes
            switch clientSide.readLine(maxLength: limit) {
            case .incomplete:
                return
            case .tooLong:
                return refuse(.badRequest, head.target == nil ? "the request line is longer than 8 KiB" : "the request headers are longer than 32 KiB")
            case .notText:
                return refuse(.badRequest, "the request holds bytes that are not text")
            case .line(let line):
                guard let target = head.target else {
                    switch RequestLine(parsing: line) {
                    case .connect(let host, let port):
                        head.target = (host, port)
                        update(.readingRequest(head, timer: timer))
                        continue
                    case .cleartext(let method):
                        return refuse(.cleartextDenied, "\(method) is plain HTTP, which carries no certificate to pin: use HTTPS through CONNECT")
                    case .bad(let why):
                        return refuse(.badRequest, why)
                    }
                }
                if line.isEmpty {
                    // The request is complete: the next state drops request_timeout's timer.
                    return identifyClient(.connect(target))
                }
                head.headerBytes += line.utf8.count + 2
                head.headerLines += 1
                guard head.headerLines <= RequestLine.maxHeaderLines else { return refuse(.badRequest, "more than 100 header lines") }
                guard RequestHeaderLine.isWellFormed(line) else { return refuse(.badRequest, "a header line is not NAME: VALUE") }
                update(.readingRequest(head, timer: timer))
            }
        }
    }
}
