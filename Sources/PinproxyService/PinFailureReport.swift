import Foundation
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy

/// A pin-failure report: the fields of RFC 7469 §3 (HPKP's report-uri format) plus pinproxy's
/// reason, entry, detail and whether the connection was refused or only reported.
public enum PinFailureReport {
    /// The report on `verdict` for a connection to `host`:`port` at `time`, as one JSON object;
    /// with `client`, it says who the client was (`pinproxy-client`); nil if it cannot be serialised.
    public static func json(verdict: Verdict, host: TargetHost, port: UInt16, at time: Date, client: ClientIdentity? = nil) -> Data? {
        let policy = verdict.entry.policy
        let knownPins = policy.pins.map { pin -> String in
            let value = pin.description.dropFirst("sha256/".count)
            return policy.pinKind == .certificate ? "cert-sha256=\"\(value)\"" : "pin-sha256=\"\(value)\""
        }
        var object: [String: Any] = [
            "date-time": rfc3339(time),
            "hostname": host.description.trimmingCharacters(in: CharacterSet(charactersIn: "[]")),
            "port": Int(port),
            "effective-expiration-date": policy.pinsExpireAt.map(rfc3339) ?? NSNull(),
            "include-subdomains": policy.includeSubdomains,
            "noted-hostname": verdict.entry.pattern?.description ?? "",
            "served-certificate-chain": verdict.presented.map(\.pem),
            "validated-certificate-chain": verdict.verified.map(\.pem),
            "known-pins": knownPins,
            "pinproxy-reason": verdict.reason?.rawValue ?? "",
            "pinproxy-entry": verdict.entry.name,
            "pinproxy-enforced": !verdict.allowsConnection,
            "pinproxy-detail": verdict.failures.map(\.description).joined(separator: "; "),
        ]
        switch client {
        case .local(let local), .partlyKnown(let local, _):
            object["pinproxy-client"] = ["uid": Int(local.uid), "user": local.user as Any, "unit": local.unit as Any, "exe": local.exe as Any]
                .compactMapValues { $0 is String || $0 is Int ? $0 : nil }
        case .unknown: object["pinproxy-client"] = "unknown"
        case .remote: object["pinproxy-client"] = "remote"
        case .forwarded(let address): object["pinproxy-client"] = ["forwarded": address.description]
        case nil: break
        }
        guard JSONSerialization.isValidJSONObject(object) else { return nil }
        return try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
    }
}
