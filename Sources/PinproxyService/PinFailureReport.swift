import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import PinproxyCore

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
        var object: [String: JSONValue] = [
            "date-time": .string(rfc3339(time)),
            "hostname": .string(host.description.trimmingBrackets()),
            "port": .integer(Int64(port)),
            "effective-expiration-date": policy.pinsExpireAt.map { .string(rfc3339($0)) } ?? .null,
            "include-subdomains": .bool(policy.includeSubdomains),
            "noted-hostname": .string(verdict.entry.pattern?.description ?? ""),
            "served-certificate-chain": .array(verdict.presented.map { .string($0.pem) }),
            "validated-certificate-chain": .array(verdict.verified.map { .string($0.pem) }),
            "known-pins": .array(knownPins.map(JSONValue.string)),
            "pinproxy-reason": .string(verdict.reason?.rawValue ?? ""),
            "pinproxy-entry": .string(verdict.entry.name),
            "pinproxy-enforced": .bool(!verdict.allowsConnection),
            "pinproxy-detail": .string(verdict.failures.map(\.description).joined(separator: "; ")),
        ]
        switch client {
        case .local(let local), .partlyKnown(let local, _):
            object["pinproxy-client"] = .object(["uid": .integer(Int64(local.uid)), "user": local.user.map(JSONValue.string),
                                                 "unit": local.unit.map(JSONValue.string), "exe": local.exe.map(JSONValue.string)]
                .compactMapValues { $0 })
        case .unknown: object["pinproxy-client"] = .string("unknown")
        case .remote: object["pinproxy-client"] = .string("remote")
        case .forwarded(let address): object["pinproxy-client"] = .object(["forwarded": .string(address.description)])
        case nil: break
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try? encoder.encode(JSONValue.object(object))
    }
}
