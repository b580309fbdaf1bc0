import Foundation
import XCTest

/// One sample as the Python `prometheus_client` text parser read it.
struct ParsedSample: Decodable, Equatable {
    let family: String
    let type: String
    let help: String
    let name: String
    let labels: [String: String]
    let value: Double
}

/// Parses Prometheus text exposition with the reference Python client
/// (`prometheus_client.parser.text_string_to_metric_families`), installing the package with pip
/// when it is missing. Throws (failing the test) when python3 is missing or parsing fails.
enum PrometheusParser {
    private static let script = """
        import json, sys
        from prometheus_client.parser import text_string_to_metric_families
        out = {"samples": [], "families": []}
        for family in text_string_to_metric_families(sys.stdin.read()):
            out["families"].append(family.name)
            for s in family.samples:
                out["samples"].append({"family": family.name, "type": family.type, "help": family.documentation,
                                       "name": s.name, "labels": s.labels, "value": s.value})
        print(json.dumps(out))
        """

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    private static let ready: Result<String, Failure> = {
        guard let python = findExecutable("python3") else {
            return .failure(Failure(description: "python3 not found: it parses /metrics with prometheus_client"))
        }
        if (try? runProcess(python, ["-c", "import prometheus_client"]))?.status == 0 { return .success(python) }
        let install = try? runProcess(python, ["-m", "pip", "install", "--quiet", "prometheus-client"], timeout: 300)
        if (try? runProcess(python, ["-c", "import prometheus_client"]))?.status == 0 { return .success(python) }
        return .failure(Failure(description: "prometheus_client missing and `pip install prometheus-client` failed: "
                                    + (install?.stderr ?? "pip did not run")))
    }()

    private struct Parsed: Decodable {
        let samples: [ParsedSample]
        let families: [String]
    }

    static func parse(_ text: String) throws -> [ParsedSample] {
        try parsed(text).samples
    }

    /// The names of the families `text` declares, those without a sample too (a counter's
    /// without its `_total`, as prometheus_client names them).
    static func families(_ text: String) throws -> [String] {
        try parsed(text).families
    }

    private static func parsed(_ text: String) throws -> Parsed {
        let python = try ready.get()
        let output = try runProcess(python, ["-c", script], input: text)
        guard output.status == 0 else {
            throw Failure(description: "prometheus_client rejected the exposition:\n\(output.stderr)\n--- text ---\n\(text)")
        }
        return try JSONDecoder().decode(Parsed.self, from: Data(output.stdout.utf8))
    }
}

extension Array where Element == ParsedSample {
    /// The value of the sample named `name` with exactly `labels`, nil when absent.
    func value(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        first { $0.name == name && $0.labels == labels }?.value
    }
}
