import Foundation
import PinproxyInterop
import PinproxyPolicy

/// The verdict on mutated chains. An input is a chain: certificates, each as a 2-byte
/// big-endian length and that many DER bytes (see Fuzz/make-seeds.py). It is judged for
/// api.test under fixed policies (Fuzz/data/verdict-*.toml), and an allow must be earned:
/// - `anchors`: root.pem is the only anchor, no pins → the leaf names api.test;
/// - `pinned`: the same, plus public-key pins → and a certificate of the verified chain has a
///   pinned key;
/// - `none`: no chain check, pinned leaf keys → the leaf has a pinned key and names api.test;
/// - `crl`: root.pem, the intermediate's CRL (which revokes revoked.der) → not that leaf.
enum VerdictTarget {
    static let time = Date(timeIntervalSince1970: 1_780_272_000)  // 2026-06-01T00:00:00Z
    static let host = TargetHost.name("api.test")

    struct Policy {
        let name: String
        let entry: PolicyEntry
        let context: VerdictContext
    }

    static let policies: [Policy] = ["anchors", "pinned", "none", "crl"].map { name in
        let path = FuzzTarget.dataDirectory + "/verdict-\(name).toml"
        do {
            let config = try ConfigLoader.load(path: path, now: time)
            return Policy(name: name, entry: config.policies.lookup(host), context: config.verdictContext)
        } catch {
            fatalError("\(path): \(error)")
        }
    }

    static let revokedLeaf = certificate("revoked.der")

    static func certificate(_ name: String) -> Certificate {
        let path = FuzzTarget.dataDirectory + "/" + name
        guard let data = FileManager.default.contents(atPath: path), let cert = try? Certificate(der: Array(data)) else {
            fatalError("cannot read \(path)")
        }
        return cert
    }

    /// Splits an input into DER certificates; nil when it is not such a chain.
    static func chain(_ input: [UInt8]) -> [Certificate]? {
        var chain: [Certificate] = []
        var rest = input[...]
        while rest.count >= 2 {
            let length = Int(rest[rest.startIndex]) << 8 | Int(rest[rest.startIndex + 1])
            rest = rest.dropFirst(2)
            guard rest.count >= length, let cert = try? Certificate(der: Array(rest.prefix(length))) else { return nil }
            chain.append(cert)
            rest = rest.dropFirst(length)
        }
        return chain.isEmpty || chain.count > 8 ? nil : chain
    }

    static func run(_ input: [UInt8]) {
        guard let chain = chain(input) else { return }
        for policy in policies {
            let verdict = TrustEvaluator.evaluate(.init(chain: chain), host: host, port: 443, entry: policy.entry,
                                                  context: policy.context, at: time)
            guard verdict.allowsConnection else { continue }
            let leaf = chain[0]
            fuzzCheck(leaf.matchesHostName("api.test"), "\(policy.name): allowed a leaf that does not name api.test: \(leaf.subject)")
            let pins = Set(policy.entry.policy.pins.map(\.digest))
            switch policy.name {
            case "pinned":
                fuzzCheck(verdict.verified.contains { pins.contains($0.publicKeySHA256) }, "pinned: allowed a chain without a pinned key")
            case "none":
                fuzzCheck(pins.contains(leaf.publicKeySHA256), "none: allowed a leaf without a pinned key: \(leaf.subject)")
            case "crl":
                fuzzCheck(leaf != revokedLeaf, "crl: allowed the revoked leaf")
            default:
                break
            }
        }
    }
}
