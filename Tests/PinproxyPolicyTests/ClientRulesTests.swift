import Foundation
import PinproxyInterop
@testable import PinproxyPolicy
import XCTest

/// `[clients]`: the pure narrowing (`ClientPolicy.decide`) over a table of cases, the selectors
/// and host patterns it matches with, the cgroup-to-unit mapping, the loader's checks, and how
/// a decision joins a verdict.
final class ClientRulesTests: XCTestCase {
    static let alice = LocalClient(uid: 1000, user: "alice", unit: nil, exe: "/usr/bin/curl")
    static let git = LocalClient(uid: 1000, user: "alice", unit: nil, exe: "/usr/bin/git")
    static let backup = LocalClient(uid: 0, user: "root", unit: "backup.service", exe: "/usr/local/bin/restic")
    static let web = LocalClient(uid: 33, user: "www-data", unit: "apache2.service", exe: "/usr/sbin/apache2")
    static let bob = LocalClient(uid: 1001, user: "bob")

    static func section(_ key: String, _ selector: ClientSelector, allow: [String]? = nil, deny: [String] = [],
                        enforce: Bool = true) -> ClientSection {
        ClientSection(selector: selector, key: key, line: 0, allow: allow?.map { HostPattern($0)! },
                      deny: deny.map { HostPattern($0)! }, enforce: enforce)
    }

    /// The example of docs/configuration.md ("Policy per client"), plus deny, remote and a second user section.
    static let rules = ClientRules(sections: [
        section("unit:backup.service", .unit("backup.service"), allow: ["backup.example.com", "*.s3.amazonaws.com"]),
        section("user:www-data", .user("www-data", uid: 33), allow: []),
        section("exe:/usr/bin/git", .exe("/usr/bin/git"), allow: ["git.example.com"], enforce: false),
        section("uid:1000", .uid(1000), deny: ["tracker.example.com"]),
        section("remote", .remote, allow: ["api.example.com"]),
    ])

    struct Case {
        let identity: ClientIdentity
        let host: String
        let outcome: ClientDecision.Outcome
        let sections: [String]
        /// Words the detail must hold (empty: the detail must be empty).
        let detail: [String]
    }

    static let cases: [Case] = [
        // The backup service: its unit section alone applies (root has no section).
        Case(identity: .local(backup), host: "backup.example.com", outcome: .allow, sections: ["unit:backup.service"], detail: []),
        Case(identity: .local(backup), host: "bucket.s3.amazonaws.com", outcome: .allow, sections: ["unit:backup.service"], detail: []),
        Case(identity: .local(backup), host: "a.b.s3.amazonaws.com", outcome: .refuse, sections: ["unit:backup.service"],
             detail: ["uid=0", "unit=backup.service", #"clients."unit:backup.service" does not allow a.b.s3.amazonaws.com"#]),
        Case(identity: .local(backup), host: "example.org", outcome: .refuse, sections: ["unit:backup.service"], detail: ["does not allow example.org"]),
        // allow = [] holds whatever else matches.
        Case(identity: .local(web), host: "backup.example.com", outcome: .refuse, sections: ["user:www-data"],
             detail: [#"clients."user:www-data" allows no host"#, "user=www-data"]),
        // A user without a section gets the host table.
        Case(identity: .local(bob), host: "tracker.example.com", outcome: .allow, sections: [], detail: []),
        // uid 1000 running curl: only its uid section, whose deny wins over no allow.
        Case(identity: .local(alice), host: "git.example.com", outcome: .allow, sections: ["uid:1000"], detail: []),
        Case(identity: .local(alice), host: "tracker.example.com", outcome: .refuse, sections: ["uid:1000"],
             detail: [#"clients."uid:1000" denies tracker.example.com"#]),
        // uid 1000 running git: both sections apply, in config order; git's is report-only.
        Case(identity: .local(git), host: "git.example.com", outcome: .allow, sections: ["exe:/usr/bin/git", "uid:1000"], detail: []),
        Case(identity: .local(git), host: "example.org", outcome: .reportOnly, sections: ["exe:/usr/bin/git", "uid:1000"],
             detail: [#"clients."exe:/usr/bin/git" does not allow example.org"#, "exe=/usr/bin/git"]),
        // deny (enforced) over the report-only section: a refusal naming the enforcing section.
        Case(identity: .local(git), host: "tracker.example.com", outcome: .refuse, sections: ["exe:/usr/bin/git", "uid:1000"],
             detail: [#"clients."uid:1000" denies tracker.example.com"#]),
        // Unknown: no section for it, refused; remote: its own section narrows.
        Case(identity: .unknown(why: "no socket"), host: "api.example.com", outcome: .refuse, sections: [],
             detail: ["unknown (no socket)", #"[clients."unknown"]"#]),
        Case(identity: .remote, host: "api.example.com", outcome: .allow, sections: ["remote"], detail: []),
        Case(identity: .remote, host: "example.org", outcome: .refuse, sections: ["remote"], detail: ["clients.remote does not allow example.org"]),
    ]

    func testTheNarrowingTable() {
        for (index, c) in Self.cases.enumerated() {
            let decision = ClientPolicy.decide(host: TargetHost(c.host)!, identity: c.identity, rules: Self.rules)
            let label = "case \(index): \(c.identity) → \(c.host)"
            XCTAssertEqual(decision.outcome, c.outcome, label)
            XCTAssertEqual(decision.sections, c.sections, label)
            XCTAssertEqual(decision.identity, c.identity, label)
            XCTAssertEqual(decision.metricLabel, c.sections.isEmpty ? "none" : c.sections.joined(separator: ","), label)
            if c.detail.isEmpty { XCTAssertEqual(decision.detail, "", label) }
            for word in c.detail { XCTAssertTrue(decision.detail.contains(word), "\(label): \(decision.detail) lacks \(word)") }
        }
    }

    func testUnknownClientsWithTheirOwnSectionAndWithoutAnySection() {
        let unknownAllowed = ClientRules(sections: [Self.section("unknown", .unknown, allow: ["api.example.com"])])
        let unknown = ClientIdentity.unknown(why: "its socket is not established")
        XCTAssertEqual(ClientPolicy.decide(host: TargetHost("api.example.com")!, identity: unknown, rules: unknownAllowed).outcome, .allow)
        XCTAssertEqual(ClientPolicy.decide(host: TargetHost("example.org")!, identity: unknown, rules: unknownAllowed).outcome, .refuse)
        // An empty [clients."unknown"] lets unknown clients have the host table.
        let unknownOpen = ClientRules(sections: [Self.section("unknown", .unknown)])
        XCTAssertEqual(ClientPolicy.decide(host: TargetHost("example.org")!, identity: unknown, rules: unknownOpen).outcome, .allow)
        // Without any section, nobody is narrowed: not even unknown clients.
        XCTAssertEqual(ClientPolicy.decide(host: TargetHost("example.org")!, identity: unknown, rules: ClientRules()).outcome, .allow)
        // Remote clients are not narrowed by sections about local ones.
        let local = ClientRules(sections: [Self.section("uid:0", .uid(0), allow: [])])
        XCTAssertEqual(ClientPolicy.decide(host: TargetHost("example.org")!, identity: .remote, rules: local).sections, [])
    }

    func testUserAndUIDSelectorsMatchTheSameClients() {
        let byUser = ClientSelector.user("alice", uid: 1000)
        let byUID = ClientSelector.uid(1000)
        for identity: ClientIdentity in [.local(Self.alice), .local(LocalClient(uid: 1000)), .local(Self.bob), .remote, .unknown(why: "-")] {
            XCTAssertEqual(byUser.matches(identity), byUID.matches(identity), "\(identity)")
        }
        // The name a client's lookup found (or did not) does not matter: the uid does.
        XCTAssertTrue(byUser.matches(.local(LocalClient(uid: 1000, user: nil))))
        XCTAssertFalse(ClientSelector.exe("/usr/bin/git").matches(.local(LocalClient(uid: 1000))))
        XCTAssertFalse(ClientSelector.unit("backup.service").matches(.local(LocalClient(uid: 0))))
    }

    func testHostPatternsMatchLikeHostEntries() {
        let cases: [(String, String, Bool)] = [
            ("api.example.com", "api.example.com", true), ("api.example.com", "www.api.example.com", false),
            ("*.example.com", "api.example.com", true), ("*.example.com", "example.com", false),
            ("*.example.com", "a.b.example.com", false), ("*.example.com", "xexample.com", false),
            ("127.0.0.1", "127.0.0.1", true), ("::1", "[::1]", true), ("127.0.0.1", "localhost", false),
            ("API.Example.COM.", "api.example.com", true),
        ]
        for (pattern, host, expected) in cases {
            XCTAssertEqual(HostPattern(pattern)!.matches(TargetHost(host)!), expected, "\(pattern) vs \(host)")
        }
    }

    func testCgroupToSystemUnit() {
        let cases: [(String, String?)] = [
            ("/system.slice/backup.service", "backup.service"),
            ("/system.slice/backup.service/payload", "backup.service"),
            ("/system.slice/system-getty.slice/getty@tty1.service", "getty@tty1.service"),
            ("/system.slice/system-openvpn.slice/openvpn-client@corp.service/sub", "openvpn-client@corp.service"),
            ("/system.slice", nil),
            ("/system.slice/docker-0123.scope", nil),
            ("/system.slice/-.mount", nil),
            ("/user.slice/user-1000.slice/user@1000.service/app.slice/backup.service", nil),
            ("/user.slice/user-1000.slice/session-3.scope", nil),
            ("/backup.service", nil),
            ("/", nil),
            ("system.slice/backup.service", nil),
            ("/init.scope", nil),
        ]
        for (path, unit) in cases {
            XCTAssertEqual(SystemUnit.name(ofCgroup: path), unit, path)
        }
    }

    func testSelectorsAsWritten() {
        let good: [(String, ClientSelectorText)] = [
            ("uid:0", .uid(0)), ("uid:1000", .uid(1000)), ("uid:4294967294", .uid(4_294_967_294)),
            ("user:www-data", .user("www-data")), ("exe:/usr/bin/git", .exe("/usr/bin/git")),
            ("unit:backup.service", .unit("backup.service")), ("unit:getty@tty1.service", .unit("getty@tty1.service")),
            ("unknown", .unknown), ("remote", .remote),
        ]
        for (key, selector) in good {
            XCTAssertEqual(try? ClientSelectorText.parse(key).get(), selector, key)
        }
        for key in ["uid:", "uid:01000", "uid:-1", "uid:4294967295", "uid:1e3", "user:", "user:a b", "user:a:b",
                    "exe:git", "exe:/usr/bin/", "exe:/usr//bin/git", "exe:/usr/bin/../bin/git", "exe:/", "unit:backup",
                    "unit:backup.timer", "unit:@.service", "unknown:x", "Remote", "gid:0", "backup.service", ""] {
            XCTAssertNil(try? ClientSelectorText.parse(key).get(), key)
        }
    }

    // MARK: Loading

    func testSectionsLoadInFileOrderWithTheirKeys() throws {
        let config = try ConfigLoader.load(text: """
            [clients."uid:65534"]
            allow = ["api.test"]
            deny = ["*.example.com"]

            [clients."user:root"]
            enforce = false
            allow = []

            [clients."unknown"]
            """, path: "/etc/pinproxy.toml", directory: "/")
        XCTAssertEqual(config.clients.sections.map(\.key), ["uid:65534", "user:root", "unknown"])
        XCTAssertEqual(config.clients.sections.map(\.line), [1, 5, 9])
        XCTAssertEqual(config.clients.sections[0].allow, [HostPattern("api.test")!])
        XCTAssertEqual(config.clients.sections[0].deny, [HostPattern("*.example.com")!])
        XCTAssertEqual(config.clients.sections[1].selector, .user("root", uid: 0))
        XCTAssertEqual(config.clients.sections[1].allow, [])
        XCTAssertFalse(config.clients.sections[1].enforce)
        XCTAssertNil(config.clients.sections[2].allow)
        XCTAssertFalse(config.clients.needsExecutable)
        XCTAssertTrue(try ConfigLoader.load(text: "", path: "x", directory: "/").clients.isEmpty)
    }

    func testLoaderErrorsAreFileAndLine() {
        let cases: [(String, [(Int, String)])] = [
            ("[clients.\"uid:1\"]\nallow = []\nalow = []\n", [(3, #"unknown key clients."uid:1".alow (did you mean "allow"?)"#)]),
            ("[clients.\"uid:1\"]\nallow = [\"not a host\"]\n", [(2, #"clients."uid:1".allow: "not a host" is not a host pattern: a DNS name, "*." followed by a name, or an IP literal"#)]),
            ("[clients.\"uid:1\"]\nenforce = \"no\"\n", [(2, #"clients."uid:1".enforce must be true or false, not a string"#)]),
            ("[clients.\"gid:1\"]\n", [(1, #"clients."gid:1": not a client selector: use uid:N, user:NAME, exe:/absolute/path, unit:NAME.service, net:CIDR, unknown or remote"#)]),
            ("[clients.\"unit:backup\"]\n", [(1, #"clients."unit:backup": unit: takes a system service, such as unit:backup.service (user units are never matched)"#)]),
            ("[clients.\"user:no-such-user-pinproxy\"]\n", [(1, #"clients."user:no-such-user-pinproxy": the user database has no user no-such-user-pinproxy"#)]),
            ("[clients.\"uid:0\"]\n\n[clients.\"user:root\"]\nallow = []\n",
             [(3, #"clients."user:root" names uid 0, as clients."uid:0" (line 1) does: write one section per user"#)]),
            ("[clients]\n\"uid:0\" = 1\n", [(2, #"clients."uid:0" must be a table such as [clients."uid:0"], not an integer"#)]),
            ("clients = 3\n", [(1, "clients must be a table, not an integer")]),
        ]
        for (text, expected) in cases {
            do {
                _ = try ConfigLoader.load(text: text, path: "/etc/p.toml", directory: "/")
                XCTFail("loaded: \(text)")
            } catch {
                XCTAssertEqual(error.diagnostics.map(\.line), expected.map(\.0), text)
                XCTAssertEqual(error.diagnostics.map(\.message), expected.map(\.1), text)
            }
        }
    }

    func testExecutablePathsAreCheckedAgainstTheFileSystem() throws {
        var system = ClientRulesCheck.System()
        system.uid = { _ in .missing }
        system.realPath = { ["/usr/bin/git": "/usr/bin/git", "/bin/git": "/usr/bin/git"][$0] }
        let raw = [RawClientSection(key: "exe:/usr/bin/git", line: 1, selector: .exe("/usr/bin/git")),
                   RawClientSection(key: "exe:/bin/git", line: 3, selector: .exe("/bin/git")),
                   RawClientSection(key: "exe:/opt/new/tool", line: 5, selector: .exe("/opt/new/tool"))]
        let (rules, findings) = ClientRulesCheck.rules(raw, system: system)
        XCTAssertEqual(rules.sections.map(\.key), ["exe:/usr/bin/git", "exe:/opt/new/tool"])
        XCTAssertTrue(rules.needsExecutable)
        XCTAssertEqual(findings.map(\.severity), [.error, .warning])
        XCTAssertEqual(findings.first?.message,
                       #"clients."exe:/bin/git": /bin/git resolves to /usr/bin/git, and the kernel reports a program by its real path: write exe:/usr/bin/git, or this section never matches"#)
    }

    // MARK: Joining a verdict

    func testADecisionJoinsTheVerdictLast() throws {
        let pki = try PKI.shared()
        let config = try pki.loadConfig("[hosts.\"api.test\"]\ntrust = [\"root-a.pem\"]\npin = \"public-key\"\n" + ConfigLoaderTests.twoPins)
        let chain = TrustEvaluator.Presentation(chain: try pki.certificates("api-chain.pem"))
        let host = TargetHost("api.test")!
        let allowed = TrustEvaluator.evaluate(chain, host: host, port: 443, entry: config.policies.lookup(host),
                                             context: config.verdictContext, at: evaluationTime)
        XCTAssertEqual(allowed.summary, "allow")
        let reportOnly = ClientDecision(identity: .remote, sections: ["remote"], outcome: .reportOnly, detail: "client remote: no")
        let refused = ClientDecision(identity: .remote, sections: ["remote"], outcome: .refuse, detail: "client remote: no")
        XCTAssertEqual(TrustEvaluator.adding(reportOnly, to: allowed).summary, "allow (would refuse: client-denied)")
        XCTAssertEqual(TrustEvaluator.adding(reportOnly, to: allowed).failures.map(\.description), ["client-denied: client remote: no"])
        XCTAssertEqual(TrustEvaluator.adding(refused, to: allowed).summary, "refuse: client-denied")
        XCTAssertEqual(TrustEvaluator.adding(.notApplied, to: allowed).summary, "allow")
        // A refusal by the entry stays one; report-only client-denied does not hide it.
        let pinRefused = TrustEvaluator.evaluate(chain, host: host, port: 8443, entry: config.policies.lookup(host),
                                                context: config.verdictContext, at: evaluationTime)
        XCTAssertEqual(TrustEvaluator.adding(reportOnly, to: pinRefused).summary, "refuse: port-denied")
        XCTAssertEqual(TrustEvaluator.adding(refused, to: pinRefused).summary, "refuse: client-denied")
    }
}
