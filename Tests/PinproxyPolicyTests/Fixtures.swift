import Foundation
import PinproxyInterop
import PinproxyPolicy
import XCTest

/// The fixed instant the tests evaluate at: every standard certificate is valid then
/// (2020-01-01 … 2045-01-01) unless its scenario is about time.
let evaluationTime = date("2026-06-01T00:00:00Z")

/// Parses an RFC 3339 UTC time such as `2026-06-01T00:00:00Z`; traps on a typo in a test.
func date(_ text: String) -> Date {
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime]
    guard let parsed = formatter.date(from: text) else { fatalError("not an RFC 3339 time: \(text)") }
    return parsed
}

/// A fixture that could not be set up (the PKI generator failed, a file is missing).
struct FixtureError: Error, CustomStringConvertible {
    let description: String
}

/// The package root, found from this file's path: `<root>/Tests/PinproxyPolicyTests/Fixtures.swift`.
let packageRoot: URL = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// The standard test PKI, written by `python3 Tests/e2e/pki.py DIR` once per test process into
/// a temporary directory that is removed at exit. Keys are fresh on every run, so pins are
/// looked up in the generator's `pins.json`, never written into a test.
final class PKI: Sendable {
    /// The directory holding the standard set (`root-a.pem`, `api-chain.pem`, `anchors/` …).
    let directory: String
    /// `pins.json`: stem → `["spki": pin, "cert": pin]`.
    let pins: [String: [String: String]]

    private init(directory: String, pins: [String: [String: String]]) {
        self.directory = directory
        self.pins = pins
    }

    private static let generated: Result<PKI, any Error> = Result { try PKI.generate() }

    /// The PKI of this test process; generated on first use.
    static func shared() throws -> PKI { try generated.get() }

    private static func generate() throws -> PKI {
        let script = packageRoot.appendingPathComponent("Tests/e2e/pki.py").path
        guard FileManager.default.fileExists(atPath: script) else {
            throw FixtureError(description: "the test PKI generator \(script) is missing")
        }
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("pinproxy-unit-pki-\(getpid())-\(UUID().uuidString.prefix(8))").path
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script, directory]
        let errors = Pipe()
        process.standardError = errors
        try process.run()
        let message = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw FixtureError(description: "\(script) failed (\(process.terminationStatus)): \(String(decoding: message, as: UTF8.self))")
        }
        createdDirectory = directory
        atexit { PKI.removeCreatedDirectory() }
        let json = try Data(contentsOf: URL(fileURLWithPath: directory + "/pins.json"))
        guard let pins = try JSONSerialization.jsonObject(with: json) as? [String: [String: String]] else {
            throw FixtureError(description: "pins.json is not {stem: {spki, cert}}")
        }
        return PKI(directory: directory, pins: pins)
    }

    /// The directory `generate` made, for the exit handler.
    nonisolated(unsafe) private static var createdDirectory: String?

    private static func removeCreatedDirectory() {
        if let createdDirectory { try? FileManager.default.removeItem(atPath: createdDirectory) }
    }

    /// The absolute path of a file of the set.
    func path(_ name: String) -> String { directory + "/" + name }

    /// The bytes of a file of the set.
    func bytes(_ name: String) throws -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path(name)) else {
            throw FixtureError(description: "the test PKI has no file \(name)")
        }
        return Array(data)
    }

    /// Every certificate in a file of the set (a chain file: leaf first).
    func certificates(_ name: String) throws -> [Certificate] {
        try Certificate.parseAll(bytes(name))
    }

    /// The first certificate of a file (`api.pem` → the api leaf).
    func certificate(_ name: String) throws -> Certificate {
        guard let first = try certificates(name).first else { throw FixtureError(description: "\(name) holds no certificate") }
        return first
    }

    /// The public-key pin of a certificate of the set (`spki("api")`).
    func spki(_ stem: String) -> String { pin(stem, "spki") }

    /// The certificate pin of a certificate of the set (`certPin("api")`).
    func certPin(_ stem: String) -> String { pin(stem, "cert") }

    private func pin(_ stem: String, _ kind: String) -> String {
        guard let pin = pins[stem]?[kind] else { fatalError("pins.json has no \(kind) pin for \(stem)") }
        return pin
    }

    /// Replaces `{spki:STEM}` and `{cert:STEM}` in a config text with the pins of this run.
    func substitute(_ text: String) -> String {
        var result = text
        for (stem, kinds) in pins {
            for (kind, pin) in kinds { result = result.replacingOccurrences(of: "{\(kind):\(stem)}", with: pin) }
        }
        precondition(!result.contains("{spki:") && !result.contains("{cert:"), "unknown pin placeholder in \(text)")
        return result
    }

    // MARK: Configs

    /// The name diagnostics give a config loaded from text by `loadConfig`.
    var configPath: String { path("pinproxy.toml") }

    /// Loads config `text` (pin placeholders substituted) as if it were `pinproxy.toml` beside the
    /// PKI files, so that they are reachable by relative path.
    func loadConfig(_ text: String, now: Date = evaluationTime) throws(ConfigError) -> Config {
        try ConfigLoader.load(text: substitute(text), path: configPath, directory: directory, now: now)
    }

    /// The errors of a config that must not load; fails the test (and returns none) if it loads.
    func configErrors(_ text: String, now: Date = evaluationTime,
                      file: StaticString = #filePath, line: UInt = #line) -> [Diagnostic] {
        do {
            let config = try loadConfig(text, now: now)
            XCTFail("the config loaded (\(config.policies.entries.count) entries) but must be rejected:\n\(text)", file: file, line: line)
            return []
        } catch {
            XCTAssertTrue(error.diagnostics.allSatisfy { $0.severity == .error && $0.file == configPath },
                          "\(error.diagnostics)", file: file, line: line)
            return error.diagnostics
        }
    }

    /// The warnings of a config that must load; fails the test (and returns none) if it does not.
    func configWarnings(_ text: String, now: Date = evaluationTime,
                        file: StaticString = #filePath, line: UInt = #line) -> [Diagnostic] {
        do {
            return try loadConfig(text, now: now).warnings
        } catch {
            XCTFail("the config must load but was rejected:\n\(error)", file: file, line: line)
            return []
        }
    }

    // MARK: Verdicts

    /// Loads `config`, looks `host` up in its table and evaluates `chain` (a file of the set, leaf
    /// first) with the optional `staple` file, exactly as `pinproxy evaluate` does.
    func evaluate(config: String, host: String, port: UInt16 = 443, chain: String, staple: String? = nil,
                  at time: Date = evaluationTime) throws -> Verdict {
        guard let target = TargetHost(host) else { throw FixtureError(description: "\(host) is not a host") }
        let loaded = try loadConfig(config, now: time)
        let presentation = TrustEvaluator.Presentation(chain: try certificates(chain), ocspStaple: try staple.map(bytes))
        return TrustEvaluator.evaluate(presentation, host: target, port: port, entry: loaded.policies.lookup(target),
                                       context: loaded.verdictContext, at: time)
    }
}

/// A fresh temporary directory in which every file of the PKI is reachable by its plain name
/// (symbolic links), for configs that need files of their own or are loaded from disk.
final class Workspace {
    let directory: String

    init(_ pki: PKI) throws {
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("pinproxy-unit-ws-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        for name in try FileManager.default.contentsOfDirectory(atPath: pki.directory) {
            try FileManager.default.createSymbolicLink(atPath: directory + "/" + name, withDestinationPath: pki.path(name))
        }
    }

    deinit {
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Writes `contents` to `name` (relative to the workspace, directories created) and returns its path.
    @discardableResult
    func write(_ name: String, _ contents: [UInt8]) throws -> String {
        let path = directory + "/" + name
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        guard FileManager.default.createFile(atPath: path, contents: Data(contents)) else {
            throw FixtureError(description: "cannot write \(path)")
        }
        return path
    }

    @discardableResult
    func write(_ name: String, _ text: String) throws -> String { try write(name, Array(text.utf8)) }
}
