import Foundation
import PinproxyInterop
import PinproxyPolicy
import XCTest

/// `PolicyTable.lookup`: exact > `*.` > include_subdomains (longest suffix) > `[default]`.
final class PolicyTableTests: XCTestCase {
    var pki: PKI!

    override func setUpWithError() throws {
        pki = try PKI.shared()
    }

    /// Entries that deny, so that nothing but the pattern matters; `[default]` allows.
    static let table = """
        [default]
        trust = ["root-a.pem"]

        [hosts."example.test"]
        action = "deny"
        include_subdomains = true

        [hosts."api.example.test"]
        action = "deny"
        include_subdomains = true

        [hosts."*.example.test"]
        action = "deny"

        [hosts."x.api.example.test"]
        action = "deny"

        [hosts."plain.test"]
        action = "deny"

        [hosts."*.wild.test"]
        action = "deny"

        [hosts."127.0.0.1"]
        action = "deny"

        [hosts."[2001:db8::1]"]
        action = "deny"
        """

    /// Asserts which entry each host gets, by the entry's name.
    func assertLookups(_ text: String, _ expected: [(String, String)], file: StaticString = #filePath, line: UInt = #line) throws {
        let table = try pki.loadConfig(text).policies
        for (host, name) in expected {
            guard let target = TargetHost(host) else {
                XCTFail("\(host) is not a host", file: file, line: line)
                continue
            }
            XCTAssertEqual(table.lookup(target).name, name, host, file: file, line: line)
        }
    }

    func testPrecedence() throws {
        try assertLookups(Self.table, [
            // Exact beats everything.
            ("example.test", #"hosts."example.test""#),
            ("api.example.test", #"hosts."api.example.test""#),
            ("x.api.example.test", #"hosts."x.api.example.test""#),
            // "*." beats include_subdomains for one more label.
            ("a.example.test", #"hosts."*.example.test""#),
            // include_subdomains, longest suffix first.
            ("b.api.example.test", #"hosts."api.example.test""#),
            ("c.b.api.example.test", #"hosts."api.example.test""#),
            ("y.x.api.example.test", #"hosts."api.example.test""#),
            ("a.b.example.test", #"hosts."example.test""#),
            // Nothing matches.
            ("other.test", "default"),
            ("example.test.other", "default"),
            ("notexample.test", "default"),
        ])
    }

    func testExactEntryWithoutIncludeSubdomains() throws {
        try assertLookups(Self.table, [
            ("plain.test", #"hosts."plain.test""#),
            ("a.plain.test", "default"),
            ("aplain.test", "default"),
        ])
    }

    /// `*.` matches exactly one more label: not the parent, not two labels.
    func testWildcardMatchesExactlyOneLabel() throws {
        try assertLookups(Self.table, [
            ("a.wild.test", #"hosts."*.wild.test""#),
            ("xn--bcher-kva.wild.test", #"hosts."*.wild.test""#),
            ("wild.test", "default"),
            ("a.b.wild.test", "default"),
            ("awild.test", "default"),
        ])
    }

    /// Hosts and patterns are compared lower-case, without one trailing dot.
    func testCaseAndTrailingDot() throws {
        try assertLookups(Self.table, [
            ("EXAMPLE.test", #"hosts."example.test""#),
            ("example.test.", #"hosts."example.test""#),
            ("A.Wild.TEST.", #"hosts."*.wild.test""#),
            ("B.API.example.test", #"hosts."api.example.test""#),
        ])
        try assertLookups("""
            [hosts."Mixed.Case.TEST."]
            action = "deny"
            [hosts."*.UPPER.test"]
            action = "deny"
            """, [
            ("mixed.case.test", #"hosts."Mixed.Case.TEST.""#),
            ("a.upper.test", #"hosts."*.UPPER.test""#),
        ])
    }

    /// IP entries match the address in any textual form, and only by address.
    func testIPLiterals() throws {
        try assertLookups(Self.table, [
            ("127.0.0.1", #"hosts."127.0.0.1""#),
            ("[2001:db8::1]", #"hosts."[2001:db8::1]""#),
            ("2001:db8::1", #"hosts."[2001:db8::1]""#),
            ("2001:DB8:0:0:0:0:0:1", #"hosts."[2001:db8::1]""#),
            ("[2001:0db8::0001]", #"hosts."[2001:db8::1]""#),
            ("127.0.0.2", "default"),
            ("::1", "default"),
        ])
    }

    /// The table keeps every entry in config order, with the line of its header.
    func testEntriesInConfigOrder() throws {
        let table = try pki.loadConfig(Self.table).policies
        XCTAssertEqual(table.entries.map(\.pattern?.description), ["example.test", "api.example.test", "*.example.test",
                                                                  "x.api.example.test", "plain.test", "*.wild.test",
                                                                  "127.0.0.1", "2001:db8::1"])
        XCTAssertEqual(table.entries.map(\.line), [4, 8, 12, 15, 18, 21, 24, 27])
        XCTAssertEqual(table.defaultEntry.line, 1)
    }

    /// A table built by hand looks up the same way.
    func testHandBuiltTable() throws {
        let store = try TrustStore(anchors: [pki.certificate("root-a.pem")])
        func entry(_ pattern: String?, subdomains: Bool = false) -> PolicyEntry {
            var settings = HostPolicy.Settings(trust: .pinned(store), ports: [443])
            settings.includeSubdomains = subdomains
            return PolicyEntry(pattern: pattern.flatMap(HostPattern.init), name: pattern ?? "default", line: 0,
                               policy: try! HostPolicy(settings))
        }
        // An entry without a pattern is listed but met by no host.
        let table = PolicyTable(defaultEntry: entry(nil), entries: [entry("a.test", subdomains: true), entry("b.a.test", subdomains: true),
                                                                    entry(nil), entry("*.c.b.a.test"), entry("::1")])
        let lookups = ["x.a.test": "a.test", "x.b.a.test": "b.a.test", "d.c.b.a.test": "*.c.b.a.test", "e.d.c.b.a.test": "b.a.test",
                       "c.b.a.test": "b.a.test", "[::1]": "::1", "a.test.": "a.test", "z.test": "default"]
        for (host, name) in lookups {
            XCTAssertEqual(table.lookup(TargetHost(host)!).name, name, host)
        }
    }
}
