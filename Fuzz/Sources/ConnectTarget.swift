import PinproxyPolicy
import PinproxyProxy

/// The CONNECT request head, cut into lines as the connection reads it (at LF, a CR before
/// it dropped; only UTF-8 without control characters is text), then parsed line by line.
enum ConnectTarget {
    static func run(_ input: [UInt8]) {
        let lines = input.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        for (index, rawLine) in lines.enumerated() {
            let bytes = rawLine.last == UInt8(ascii: "\r") ? rawLine.dropLast() : rawLine[...]
            guard bytes.count <= RequestLine.maxRequestLineBytes,
                  let line = String(validating: bytes, as: UTF8.self),
                  line.utf8.allSatisfy({ $0 >= 0x20 && $0 != 0x7F || $0 == 0x09 }) else { return }
            guard index > 0 else {
                guard case .connect(let host, let port) = RequestLine(parsing: line) else { return }
                checkTarget(host, port)
                continue
            }
            if line.isEmpty { return }
            _ = RequestHeaderLine.isWellFormed(line)
        }
    }

    /// What the daemon logs and connects to (`host:port`, IPv6 in brackets) reads back as the
    /// same target: the parser's output is already normal.
    static func checkTarget(_ host: TargetHost, _ port: UInt16) {
        fuzzCheck(port > 0, "port 0 accepted")
        let again = RequestLine(parsing: "CONNECT \(host):\(port) HTTP/1.1")
        fuzzCheck(again == .connect(host, port), "\(host):\(port) does not read back as itself: \(again)")
        if case .name(let name) = host {
            fuzzCheck(name == name.lowercased() && !name.hasSuffix(".") && name.utf8.count <= 253, "name \(name) is not normal")
        }
    }
}
