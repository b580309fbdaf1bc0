import PinproxyPolicy

/// The status line of a refusal, built so that clients which print only the CONNECT answer's
/// reason phrase (Python's http.client — so urllib, requests and pip — and wget) say what
/// happened: `HTTP/1.1 403 pinproxy: pin-mismatch for api.example.com`.
enum RefusalResponse {
    /// The longest host name the phrase carries; a longer one ends in `...`.
    static let maximumHostLength = 100

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
