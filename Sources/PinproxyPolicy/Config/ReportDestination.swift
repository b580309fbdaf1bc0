import FoundationEssentials

/// One `report_to` destination of pin-failure reports.
public enum ReportDestination: Sendable, Hashable, CustomStringConvertible {
    /// `file:PATH`: appended as JSON lines.
    case file(path: String)
    /// `https://HOST[:PORT]/PATH`: POSTed as JSON.
    case https(host: String, port: UInt16, path: String)

    /// Parses `file:PATH` (a relative path is taken from `directory`) or an https URL; nil when
    /// it is neither.
    public init?(_ text: String, relativeTo directory: String) {
        if text.hasPrefix("file:") {
            let path = String(text.dropFirst("file:".count))
            guard !path.isEmpty, !path.utf8.contains(0) else { return nil }
            self = .file(path: path.hasPrefix("/") ? path : URL(fileURLWithPath: directory).appendingPathComponent(path).path)
            return
        }
        guard let url = URLComponents(string: text), url.scheme?.lowercased() == "https", let host = url.host, !host.isEmpty,
              url.user == nil, url.password == nil, url.fragment == nil else { return nil }
        let port = url.port ?? 443
        guard (1...65_535).contains(port) else { return nil }
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        guard TargetHost(bare) != nil else { return nil }
        let path = url.percentEncodedPath.isEmpty ? "/" : url.percentEncodedPath
        self = .https(host: bare.lowercased(), port: UInt16(port), path: path + (url.percentEncodedQuery.map { "?" + $0 } ?? ""))
    }

    public var description: String {
        switch self {
        case .file(let path): return "file:\(path)"
        case .https(let host, let port, let path):
            let literal = host.contains(":") ? "[\(host)]" : host
            return "https://\(literal)\(port == 443 ? "" : ":\(port)")\(path)"
        }
    }
}
