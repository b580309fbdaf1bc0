import PinproxyPolicy

/// The `Proxy-Status` header (RFC 9209) of a refusal:
/// `Proxy-Status: pinproxy; error=tls_certificate_error; details="pin-mismatch: none of the 2 …"`.
/// The value is one valid Structured Field item (RFC 8941) whatever the detail holds: the
/// details string keeps printable ASCII, writes every other character as `?`, escapes `"` and
/// `\`, and is cut (ending in `...`) so that the whole value is at most `maximumBytes` long.
enum ProxyStatus {
    static let maximumBytes = 200

    /// The header value for a refusal for `reason` saying `detail` (with or without the reason
    /// in front); `error` overrides the reason's own error type (a DNS timeout).
    static func value(reason: RefusalReason, detail: String, error: ProxyStatusError? = nil) -> String {
        let head = "pinproxy; error=\((error ?? reason.traits.proxyStatusError).rawValue); details=\""
        // A verdict's detail starts with its reason already (`pin-mismatch: none of …`).
        let text = detail.isEmpty ? reason.rawValue : detail.hasPrefix("\(reason.rawValue): ") ? detail : "\(reason.rawValue): \(detail)"
        // Room for the text before the closing quote.
        let room = maximumBytes - head.utf8.count - 1
        var escaped: [UInt8] = []
        for scalar in text.unicodeScalars where escaped.count <= room {
            let byte = scalar.value >= 0x20 && scalar.value < 0x7F ? UInt8(scalar.value) : UInt8(ascii: "?")
            if byte == UInt8(ascii: "\\") || byte == UInt8(ascii: "\"") { escaped.append(UInt8(ascii: "\\")) }
            escaped.append(byte)
        }
        if escaped.count > room {
            escaped.removeLast(escaped.count - (room - 3))
            // Never end on half an escape: an odd run of trailing backslashes ends in one.
            if escaped.reversed().prefix(while: { $0 == UInt8(ascii: "\\") }).count % 2 == 1 { escaped.removeLast() }
            escaped += Array("...".utf8)
        }
        return head + String(decoding: escaped, as: UTF8.self) + "\""
    }
}
