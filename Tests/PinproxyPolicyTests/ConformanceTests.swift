import Foundation
import PinproxyInterop
import PinproxyPolicy
import XCTest

/// The x509-limbo path-validation vectors (`Tests/conformance/x509-limbo.json`, part of the
/// repository, so that this test never skips), run through `TrustEvaluator.evaluate` as pinproxy would for an entry with
/// `trust = [the testcase's trusted certs]` and `validate_host = true`.
///
/// pinproxy does not agree with every vector (see `limbo-known-differences.txt`); the test pins
/// the set of disagreements, so that any change fails: a new false accept is a security
/// regression, a new false reject a compatibility one, and a fixed difference must leave the list.
final class ConformanceTests: XCTestCase {
    /// One limbo testcase, the fields this test reads.
    struct Testcase: Decodable {
        struct PeerName: Decodable {
            let kind: String
            let value: String
        }

        let id: String
        let validationKind: String
        let trustedCerts: [String]
        let untrustedIntermediates: [String]?
        let peerCertificate: String
        let validationTime: String?
        let expectedResult: String
        let expectedPeerName: PeerName?
        let crls: [String]?
        let maxChainDepth: Int?
        let keyUsage: [String]?

        /// Whether a pinproxy entry can state what the testcase asks: pinproxy has no setting
        /// for a maximum chain depth or for required key usages (8 testcases).
        var isExpressible: Bool { maxChainDepth == nil && (keyUsage ?? []).isEmpty }
    }

    struct Limbo: Decodable {
        let testcases: [Testcase]
    }

    /// What pinproxy decided for one testcase.
    struct Outcome {
        let allowed: Bool
        /// The verdict's failures, or why no verdict was reached.
        let detail: String
    }

    static let limboPath = packageRoot.appendingPathComponent("Tests/conformance/x509-limbo.json").path
    static let knownDifferencesPath = packageRoot.appendingPathComponent("Tests/PinproxyPolicyTests/limbo-known-differences.txt").path

    /// Evaluates one SERVER testcase as a pinproxy entry with its trusted certificates as anchors.
    static func evaluate(_ testcase: Testcase, name: Testcase.PeerName) -> Outcome {
        let anchors: [Certificate], intermediates: [Certificate], leaf: Certificate
        do {
            anchors = try testcase.trustedCerts.flatMap { try Certificate.parseAll(Array($0.utf8)) }
            intermediates = try (testcase.untrustedIntermediates ?? []).flatMap { try Certificate.parseAll(Array($0.utf8)) }
            leaf = try Certificate.parseAll(Array(testcase.peerCertificate.utf8))[0]
        } catch {
            return Outcome(allowed: false, detail: "a certificate does not parse: \(error)")
        }
        // pinproxy refuses a CONNECT to a host it cannot parse before any certificate is seen.
        guard let host = TargetHost(name.value) else {
            return Outcome(allowed: false, detail: "\(name.value) is not a host pinproxy accepts")
        }
        let store: TrustStore
        do {
            store = try TrustStore(anchors: anchors)
        } catch {
            return Outcome(allowed: false, detail: "no trust store: \(error)")
        }
        var settings = HostPolicy.Settings(trust: .anchors(store, anchors), ports: [443])
        settings.validateHost = true
        if let crls = testcase.crls, !crls.isEmpty {
            do {
                settings.revocation = .crl(try crls.flatMap { try RevocationList.parseAll(Array($0.utf8)) })
            } catch {
                return Outcome(allowed: false, detail: "a CRL does not parse: \(error)")
            }
        }
        let policy: HostPolicy
        do {
            policy = try HostPolicy(settings)
        } catch {
            return Outcome(allowed: false, detail: "no policy: \(error)")
        }
        // Limbo means "now" when it gives no time; its certificates run 1970…2969, so the fixed
        // evaluation time keeps the run reproducible.
        let time = testcase.validationTime.map(parseTime) ?? evaluationTime
        let entry = PolicyEntry(pattern: HostPattern(name.value), name: "limbo", line: 0, policy: policy)
        let verdict = TrustEvaluator.evaluate(.init(chain: [leaf] + intermediates), host: host, port: 443, entry: entry, at: time)
        return Outcome(allowed: verdict.allowsConnection, detail: verdict.failures.map(\.description).joined(separator: "; "))
    }

    /// `2024-01-01T00:00:00+00:00`, with or without fractional seconds.
    static func parseTime(_ text: String) -> Date {
        let formatter = ISO8601DateFormatter()
        for options: ISO8601DateFormatter.Options in [[.withInternetDateTime], [.withInternetDateTime, .withFractionalSeconds]] {
            formatter.formatOptions = options
            if let parsed = formatter.date(from: text) { return parsed }
        }
        fatalError("limbo time \(text) does not parse")
    }

    /// `id  # reason` lines; blank lines and lines starting with `#` are skipped.
    static func knownDifferences() throws -> [String: String] {
        let text = try String(contentsOfFile: knownDifferencesPath, encoding: .utf8)
        var result: [String: String] = [:]
        for line in text.split(separator: "\n") {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            guard !trimmed.isEmpty, !trimmed.hasPrefix("#") else { continue }
            let parts = trimmed.split(separator: "#", maxSplits: 1)
            result[parts[0].trimmingCharacters(in: .whitespaces)] = parts.count > 1 ? parts[1].trimmingCharacters(in: .whitespaces) : ""
        }
        return result
    }

    func testLimboServerVectors() throws {
        let limbo = try JSONDecoder.snakeCase.decode(Limbo.self, from: Data(contentsOf: URL(fileURLWithPath: Self.limboPath)))
        var agreed = 0, falseAccepts: [String: String] = [:], falseRejects: [String: String] = [:]
        for testcase in limbo.testcases where testcase.validationKind == "SERVER" {
            guard let name = testcase.expectedPeerName, name.kind == "DNS" || name.kind == "IP", testcase.isExpressible else { continue }
            let outcome = Self.evaluate(testcase, name: name)
            let expectAllowed = testcase.expectedResult == "SUCCESS"
            if outcome.allowed == expectAllowed {
                agreed += 1
            } else if outcome.allowed {
                falseAccepts[testcase.id] = outcome.detail
            } else {
                falseRejects[testcase.id] = outcome.detail
            }
        }
        let total = agreed + falseAccepts.count + falseRejects.count
        print("x509-limbo: \(total) expressible SERVER testcases with a DNS or IP name: \(agreed) agree, "
              + "\(falseAccepts.count) false accepts, \(falseRejects.count) false rejects")
        XCTAssertEqual(total, 189, "the vectors file holds another number of expressible testcases")

        let known = try Self.knownDifferences()
        let found = Set(falseAccepts.keys).union(falseRejects.keys)
        for id in found.subtracting(known.keys).sorted() {
            if let detail = falseAccepts[id] {
                XCTFail("NEW FALSE ACCEPT \(id): pinproxy allows a chain the vector says must fail")
                print("  false accept \(id)\(detail.isEmpty ? "" : ": " + detail)")
            } else {
                XCTFail("new false reject \(id): \(falseRejects[id]!)")
            }
        }
        for id in found.intersection(known.keys).sorted() {
            print("  known difference \(id): \(falseAccepts[id].map { "allowed" + ($0.isEmpty ? "" : " despite " + $0) } ?? "refused: " + falseRejects[id]!)")
        }
        for id in Set(known.keys).subtracting(found).sorted() {
            XCTFail("\(id) now agrees with the vector: remove it from limbo-known-differences.txt")
        }
    }
}

extension JSONDecoder {
    /// A decoder for snake_case keys.
    static var snakeCase: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        return decoder
    }
}
