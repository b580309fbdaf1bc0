/// One header line of a CONNECT request head, checked without the connection: ParseConnect
/// and the CONNECT fuzz target (Fuzz/) run this same code.
public enum RequestHeaderLine {
    /// Whether `line` is `NAME: VALUE` with a non-empty token for NAME (RFC 9110). The value
    /// is not interpreted: a CONNECT needs none of the headers.
    public static func isWellFormed(_ line: String) -> Bool {
        guard let colon = line.firstIndex(of: ":"), colon != line.startIndex else { return false }
        return line[..<colon].utf8.allSatisfy(RequestLine.isTokenByte)
    }
}
