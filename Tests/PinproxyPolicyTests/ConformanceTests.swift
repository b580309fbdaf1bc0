import Foundation
import PinproxyInterop
import PinproxyPolicy
import XCTest

/// The x509-limbo and BetterTLS path-validation vectors, read from `../shared/conformance/`
/// beside the checkout (or `PINPROXY_CONFORMANCE_DIR`) and never copied into the repository,
/// run through `TrustEvaluator.evaluate` as pinproxy would for an entry with
/// `trust = [the testcase's trusted certs]` and `validate_host = true`.
///
/// pinproxy does not agree with every vector (see `limbo-known-differences.txt` and
/// `bettertls-known-differences.txt`); each test pins its set of disagreements, so that any
/// change fails: a new false accept is a security regression, a new false reject a
/// compatibility one, and a fixed difference must leave the list.
///
/// Where the directory is absent the tests skip with one line naming it; with
/// `PINPROXY_REQUIRE_CONFORMANCE=1` (CI) they fail instead.
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

    /// One set of vectors: its file in the conformance directory, the file of pinproxy's known
    /// differences (beside this test), how many expressible testcases it holds, and whether the
    /// entry keeps the web-PKI profile on.
    struct VectorSet {
        let file: String
        let knownDifferences: String
        let expressible: Int
        let requireWebPKIProfile: Bool

        /// The non-BetterTLS x509-limbo set, under the default (web-PKI) profile.
        static let limbo = VectorSet(file: "x509-limbo.json", knownDifferences: "limbo-known-differences.txt",
                                     expressible: 189, requireWebPKIProfile: true)
        /// BetterTLS's path-building and name-constraint cases: `require_web_pki_profile = false`,
        /// as for a private CA (their leaves carry a CN that is not among their SANs).
        static let betterTLS = VectorSet(file: "bettertls-sample.json", knownDifferences: "bettertls-known-differences.txt",
                                         expressible: 1500, requireWebPKIProfile: false)
    }

    /// The vectors are required and absent.
    struct MissingVectors: Error, CustomStringConvertible {
        let message: String
        var description: String { message }
    }

    /// `PINPROXY_CONFORMANCE_DIR`, else `../shared/conformance` from the package root.
    static var conformanceDirectory: URL {
        if let override = ProcessInfo.processInfo.environment["PINPROXY_CONFORMANCE_DIR"], !override.isEmpty {
            return URL(fileURLWithPath: override)
        }
        return packageRoot.deletingLastPathComponent().appendingPathComponent("shared/conformance")
    }

    /// The vectors file of `set`; skips the test (or fails it, with
    /// `PINPROXY_REQUIRE_CONFORMANCE=1`) when it is not there.
    static func vectorsFile(_ set: VectorSet) throws -> URL {
        let url = conformanceDirectory.appendingPathComponent(set.file)
        guard FileManager.default.isReadableFile(atPath: url.path) else {
            let message = "conformance vectors not found: \(url.path) (set PINPROXY_CONFORMANCE_DIR)"
            if ProcessInfo.processInfo.environment["PINPROXY_REQUIRE_CONFORMANCE"] == "1" {
                throw MissingVectors(message: message + "; PINPROXY_REQUIRE_CONFORMANCE=1 requires them")
            }
            throw XCTSkip(message)
        }
        return url
    }

    /// Evaluates one SERVER testcase as a pinproxy entry with its trusted certificates as anchors.
    static func evaluate(_ testcase: Testcase, name: Testcase.PeerName, requireWebPKIProfile: Bool) -> Outcome {
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
        settings.requireWebPKIProfile = requireWebPKIProfile
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
        let context: VerdictContext
        do {
            context = VerdictContext(publicSuffixes: try PublicSuffixList.loadSystem())
        } catch {
            return Outcome(allowed: false, detail: "no public suffix list: \(error)")
        }
        let verdict = TrustEvaluator.evaluate(.init(chain: [leaf] + intermediates), host: host, port: 443, entry: entry,
                                              context: context, at: time)
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
    static func knownDifferences(_ set: VectorSet) throws -> [String: String] {
        let path = packageRoot.appendingPathComponent("Tests/PinproxyPolicyTests").appendingPathComponent(set.knownDifferences).path
        let text = try String(contentsOfFile: path, encoding: .utf8)
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
        try check(.limbo)
    }

    func testBetterTLSServerVectors() throws {
        try check(.betterTLS)
    }

    /// Runs every expressible SERVER testcase of `set` and compares the disagreements with its
    /// known-differences file, in both directions.
    func check(_ set: VectorSet) throws {
        let vectors = try JSONDecoder.snakeCase.decode(Limbo.self, from: Data(contentsOf: Self.vectorsFile(set)))
        var agreed = 0, falseAccepts: [String: String] = [:], falseRejects: [String: String] = [:]
        for testcase in vectors.testcases where testcase.validationKind == "SERVER" {
            guard let name = testcase.expectedPeerName, name.kind == "DNS" || name.kind == "IP", testcase.isExpressible else { continue }
            let outcome = Self.evaluate(testcase, name: name, requireWebPKIProfile: set.requireWebPKIProfile)
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
        print("\(set.file): \(total) expressible SERVER testcases with a DNS or IP name: \(agreed) agree, "
              + "\(falseAccepts.count) false accepts, \(falseRejects.count) false rejects")
        XCTAssertEqual(total, set.expressible, "\(set.file) holds another number of expressible testcases")

        let known = try Self.knownDifferences(set)
        let found = Set(falseAccepts.keys).union(falseRejects.keys)
        for id in found.subtracting(known.keys).sorted() {
            if let detail = falseAccepts[id] {
                XCTFail("NEW FALSE ACCEPT \(id): pinproxy allows a chain the vector says must fail")
                print("  false accept \(id)\(detail.isEmpty ? "" : ": " + detail)")
            } else {
                XCTFail("new false reject \(id): \(falseRejects[id] ?? "")")
            }
        }
        for id in found.intersection(known.keys).sorted() {
            print("  known difference \(id): \(falseAccepts[id].map { "allowed" + ($0.isEmpty ? "" : " despite " + $0) } ?? "refused: " + (falseRejects[id] ?? ""))")
        }
        for id in Set(known.keys).subtracting(found).sorted() {
            XCTFail("\(id) now agrees with the vector: remove it from \(set.knownDifferences)")
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
