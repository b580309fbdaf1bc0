import Foundation
import PinproxyInterop
@testable import PinproxyPolicy
import XCTest

/// `ConfigLoader`: every error the spec names, at its exact line, every error reported, the
/// warnings, file loading and the built-in default. Line numbers count from the first line of
/// each config text.
final class ConfigLoaderTests: XCTestCase {
    var pki: PKI!

    override func setUpWithError() throws {
        pki = try PKI.shared()
    }

    /// Two pins so that entries get no single-pin warning.
    static let twoPins = #"pins = ["{spki:api}", "{spki:api-newkey}"]"#
    /// The malformed-pin message, after the quoted pin.
    static let pinHelp = #": a pin is "sha256/" followed by the 44-character padded base64 of a 32-byte SHA-256 digest (see `pinproxy pin FILE`)"#
    /// The invalid-pattern message, after the entry name.
    static let patternHelp = #": invalid host pattern: use a DNS name in LDH ASCII (xn-- form for internationalised names), "*." followed by a name, or an IP literal"#

    /// Asserts that `text` is rejected with exactly `expected` (line, message) errors. A message
    /// ending in `…` matches as a prefix.
    func assertErrors(_ text: String, _ expected: [(Int, String)], now: Date = evaluationTime,
                      file: StaticString = #filePath, line: UInt = #line) {
        let got = pki.configErrors(text, now: now, file: file, line: line)
        XCTAssertEqual(got.count, expected.count, "errors: \(got.map(\.description))", file: file, line: line)
        for (diagnostic, (expectedLine, message)) in zip(got, expected) {
            XCTAssertEqual(diagnostic.line, expectedLine, diagnostic.message, file: file, line: line)
            if message.hasSuffix("…") {
                XCTAssertTrue(diagnostic.message.hasPrefix(String(message.dropLast())), "\(diagnostic.message)\ndoes not start with\n\(message)", file: file, line: line)
            } else {
                XCTAssertEqual(diagnostic.message, message, file: file, line: line)
            }
        }
    }

    /// Asserts that `text` loads with exactly `expected` (line, message) warnings.
    func assertWarnings(_ text: String, _ expected: [(Int, String)], now: Date = evaluationTime,
                        file: StaticString = #filePath, line: UInt = #line) {
        let got = pki.configWarnings(text, now: now, file: file, line: line)
        XCTAssertEqual(got.map(\.line), expected.map(\.0), "warnings: \(got.map(\.description))", file: file, line: line)
        XCTAssertEqual(got.map(\.message), expected.map(\.1), file: file, line: line)
        XCTAssertTrue(got.allSatisfy { $0.severity == .warning }, file: file, line: line)
    }

    // MARK: Keys and types

    func testUnknownKeys() {
        assertErrors("""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            frobnicate = true
            """, [(3, #"unknown key hosts."api.test".frobnicate"#)])
        assertErrors("""
            [default]
            enfroce = false
            """, [(2, #"unknown key default.enfroce (did you mean "enforce"?)"#)])
        assertErrors("""
            [hosts."api.test"]
            validate_hots = false
            """, [(2, #"unknown key hosts."api.test".validate_hots (did you mean "validate_host"?)"#)])
        assertErrors("""
            [proxy]
            listen = ["127.0.0.1:3128"]
            metrics_listne = "127.0.0.1:9128"
            """, [(3, #"unknown key proxy.metrics_listne (did you mean "metrics_listen"?)"#)])
        // A proxy key is unknown in an entry.
        assertErrors("""
            [hosts."api.test"]
            allow_ports = [443]
            """, [(2, #"unknown key hosts."api.test".allow_ports"#)])
        assertErrors("""
            verbose = true
            [proxy]
            allow_ports = [443]
            """, [(1, "unknown key verbose")])
        assertErrors("""
            [proxy]
            allow_ports = [443]

            [host."api.test"]
            action = "deny"
            """, [(4, #"unknown key host (did you mean "hosts"?)"#)])
    }

    /// Of keys equally near an unknown one, the value's type picks; with no type to pick by, both
    /// are named.
    func testNearestKeysAreChosenByTheValuesType() {
        assertErrors("""
            [hosts."api.test"]
            pin = "public-key"
            pinz = ["{spki:api}", "{spki:api-newkey}"]
            """, [(3, #"unknown key hosts."api.test".pinz (did you mean "pins"?)"#)])
        assertErrors("""
            [hosts."api.test"]
            pinz = "public-key"
            """, [(2, #"unknown key hosts."api.test".pinz (did you mean "pin"?)"#)])
        assertErrors("""
            [hosts."api.test"]
            pinz = 7
            """, [(2, #"unknown key hosts."api.test".pinz (did you mean "pin" or "pins"?)"#)])
        assertErrors("""
            [proxy]
            worker = 4
            """, [(2, #"unknown key proxy.worker (did you mean "workers"?)"#)])
    }

    func testWrongTypes() {
        assertErrors("""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            enforce = "yes"
            """, [(3, #"hosts."api.test".enforce must be true or false, not a string"#)])
        assertErrors("""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            expires = "2040-01-01"
            """, [(3, #"hosts."api.test".expires must be a date such as 2027-01-31, not a string"#)])
        assertErrors("""
            [hosts."api.test"]
            ports = 443
            """, [(2, #"hosts."api.test".ports must be an array of port numbers, not a…"#)])
        assertErrors("""
            [hosts."api.test"]
            ports = [70000]
            """, [(2, #"hosts."api.test".ports must hold port numbers from 1 to 65535, and holds 70000"#)])
        assertErrors("""
            [hosts."api.test"]
            action = "permit"
            """, [(2, #"hosts."api.test".action = "permit" is not one of "verify", "deny", "allow-insecure""#)])
        assertErrors("""
            [hosts."api.test"]
            trust = "root-a.pem"
            """, [(2, #"hosts."api.test".trust = "root-a.pem" is not "system", "pinned", "none" or a list of certificate files"#)])
        assertErrors("""
            [hosts."api.test"]
            min_tls = 1.2
            """, [(2, #"hosts."api.test".min_tls must be a string, not a…"#)])
        assertErrors("""
            [hosts."api.test"]
            min_tls = "1.1"
            """, [(2, #"hosts."api.test".min_tls = "1.1" is not one of "1.2", "1.3""#)])
        assertErrors("""
            [hosts."api.test"]
            revocation = "always"
            """, [(2, #"hosts."api.test".revocation = "always" is not one of "off", "crl", "ocsp-staple""#)])
        assertErrors("""
            [hosts."api.test"]
            pin = "public-key"
            pins = "{spki:api}"
            """, [(3, #"hosts."api.test".pins must be an array of strings, not a string"#)])
        assertErrors("""
            [hosts]
            "api.test" = "verify"
            """, [(2, #"hosts."api.test" must be a table such as [hosts."api.test"], not a string"#)])
        assertErrors("""
            default = "verify"
            """, [(1, "default must be a table, not a string")])
        assertErrors("""
            [proxy]
            block_private_destinations = "yes"
            """, [(2, "proxy.block_private_destinations must be true or false, not a string")])
        assertErrors("""
            [proxy]
            report_rate_limit = 0
            report_file_max_bytes = -5
            """, [(2, "proxy.report_rate_limit must be at least 1"), (3, "proxy.report_file_max_bytes must be at least 1")])
        assertErrors("""
            [proxy]
            report_rate_limit = 10.5
            report_file_max_bytes = "64 MiB"
            """, [(2, "proxy.report_rate_limit must be an integer, not a floating-point number"),
                  (3, "proxy.report_file_max_bytes must be an integer, not a string")])
    }

    func testModeTunnel() throws {
        let config = try pki.loadConfig("""
            [hosts."api.test"]
            mode = "tunnel"
            [hosts."*.wild.test"]
            mode = "tunnel"
            """)
        XCTAssertEqual(config.policies.lookup(TargetHost("api.test")!).policy.mode, .tunnel)
        XCTAssertEqual(config.warnings.map(\.line), [2, 4])
        XCTAssertTrue(config.warnings[0].message.contains("relayed as it is"), config.warnings[0].message)
        XCTAssertTrue(config.warnings[1].message.contains("EVERY name it matches"), config.warnings[1].message)
        assertErrors("""
            [default]
            mode = "tunnel"
            """, [(2, #"mode = "tunnel" is not allowed in [default]: it would relay every host unverified; give each host that needs a tunnel its own [hosts."NAME"] entry"#)])
        assertErrors("""
            [hosts."api.test"]
            mode = "tunnel"
            pin = "public-key"
            pins = ["sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="]
            enforce = false
            """, [(4, #"hosts."api.test" has mode = "tunnel", which relays the client's TLS unverified: pins cannot apply; remove it, or set mode = "intercept""#),
                  (5, #"hosts."api.test" has mode = "tunnel", which relays the client's TLS unverified: enforce = false cannot apply; remove it, or set mode = "intercept""#)])
        assertErrors("""
            [default]
            mode = "transparent"
            """, [(2, #"default.mode = "transparent" is not one of "intercept", "tunnel""#)])
        XCTAssertNoThrow(try pki.loadConfig("[default]\ntrust = [\"root-a.pem\"]\nmode = \"intercept\"\n"))
    }

    func testTOMLSyntaxErrorLine() {
        assertErrors("""
            [proxy]
            allow_ports = [443]
            listen = [
              "127.0.0.1:3128"
            [default]
            """, [(5, "TOML syntax: …")])
        assertErrors("""
            # a comment
            [hosts."api.test"]
            trust = ["root-a.pem"
            """, [(3, "TOML syntax: …")])
        assertErrors("""
            [default]
            action = verify
            """, [(2, "TOML syntax: …")])
    }

    /// A string without its closing quote is named as such, at its own line.
    func testUnterminatedStringsAreNamed() {
        assertErrors("""
            [hosts."api.test"]
            pin = "public-key
            pins = ["{spki:api}", "{spki:api-newkey}"]
            """, [(2, #"unterminated string: the closing " is missing on this line"#)])
        assertErrors("""
            [hosts."api.test"]
            trust = ['root-a.pem]
            """, [(2, "unterminated string: the closing ' is missing on this line")])
        assertErrors("""
            [hosts."api.test]
            trust = ["root-a.pem"]
            """, [(1, #"unterminated string: the closing " is missing on this line"#)])
        assertErrors(#"""
            [default]
            trust = ["root-a.pem"]
            verify_command = ["/bin/true", """
            never closed
            """#, [(3, #"unterminated multi-line string: the """ that opens it here is never closed"#)])
        // Quotes that end a multi-line string just before its closing three are its own.
        XCTAssertNoThrow(try pki.loadConfig("[default]\ntrust = [\"root-a.pem\"]\nverify_command = [\"/bin/true\", \"\"\"a\"\"\"\"\"]\n"))
    }

    // MARK: Pins

    /// A malformed pin is reported at the line that holds it, even inside a multi-line array.
    func testMalformedPins() {
        let digest = Data(repeating: 0xFB, count: 32)  // base64 with '+' and '/'
        let good = "sha256/" + digest.base64EncodedString()
        XCTAssertNotNil(Pin(good))
        let malformed = [
            "sha1/" + Data(repeating: 1, count: 20).base64EncodedString(),
            "SHA256/" + digest.base64EncodedString(),
            "sha256:" + digest.base64EncodedString(),
            digest.base64EncodedString(),
            "sha256/" + digest.base64EncodedString().replacingOccurrences(of: "=", with: ""),  // unpadded
            "sha256/" + digest.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_"),  // URL-safe
            "sha256/" + Data(repeating: 1, count: 31).base64EncodedString(),
            "sha256/" + Data(repeating: 1, count: 33).base64EncodedString(),
            "sha256/" + digest.base64EncodedString() + " ",
            "sha256/",
            "",
        ]
        for bad in malformed {
            assertErrors("""
                [hosts."api.test"]
                trust = ["root-a.pem"]
                pin = "public-key"
                pins = [
                  "\(good)",
                  "\(bad)",
                ]
                """, [(6, "malformed pin \"\(bad)\"" + Self.pinHelp)])
        }
        // Two malformed pins: two errors.
        assertErrors("""
            [default]
            trust = ["root-a.pem"]
            pin = "certificate"
            pins = [
              "sha256/AAAA",
              "sha256/BBBB",
            ]
            """, [(5, "malformed pin \"sha256/AAAA\"" + Self.pinHelp), (6, "malformed pin \"sha256/BBBB\"" + Self.pinHelp)])
    }

    func testPinCombinations() {
        assertErrors("""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            pin = "none"
            \(Self.twoPins)
            """, [(1, #"hosts."api.test" gives pins but pin = "none": set pin = "public-key" or pin = "certificate" (or remove pins)"#)])
        assertErrors("""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            \(Self.twoPins)
            """, [(1, #"hosts."api.test" gives pins but pin = "none": set pin = "public-key" or pin = "certificate" (or remove pins)"#)])
        assertErrors("""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            pin = "none"
            certificates = ["api.pem", "int-a.pem"]
            """, [(1, #"hosts."api.test" gives certificates but pin = "none": set pin = "public-key" or pin = "certificate" (or remove certificates)"#)])
        assertErrors("""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            pin = "public-key"
            """, [(1, #"hosts."api.test" has pin = "public-key" but no pins and no certificates"#)])
        assertErrors("""
            # the default entry
            [default]
            trust = ["root-a.pem"]
            pin = "certificate"
            pins = []
            """, [(2, #"default has pin = "certificate" but no pins and no certificates"#)])
    }

    func testTrustAndValidateHostNeedPins() {
        assertErrors("""
            [hosts."api.test"]
            trust = "none"
            """, [(1, #"hosts."api.test" has trust = "none" without pins: it would accept any certificate; add pin and pins (or certificates)"#)])
        assertErrors("""
            [hosts."api.test"]
            trust = "none"
            pin = "public-key"
            """, [(1, #"hosts."api.test" has pin = "public-key" but no pins and no certificates"#),
                  (1, #"hosts."api.test" has trust = "none" without pins: it would accept any certificate; add pin and pins (or certificates)"#)])
        assertErrors("""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            validate_host = false
            """, [(1, #"hosts."api.test" has validate_host = false without pins: it would accept a certificate for any name; add pin and pins (or certificates)"#)])
        // Report-only where the pins are the only protection would leave none.
        assertErrors("""
            [hosts."api.test"]
            trust = "none"
            pin = "public-key"
            \(Self.twoPins)
            enforce = false
            """, [(1, #"hosts."api.test" has enforce = false with trust = "none": the pins are its only protection, and report-only would drop them; remove enforce = false (or verify the chain and the host)"#)])
        assertErrors("""
            [default]
            validate_host = false
            pin = "public-key"
            \(Self.twoPins)
            enforce = false
            """, [(1, #"default has enforce = false with validate_host = false: the pins are its only protection, and report-only would drop them; remove enforce = false (or verify the chain and the host)"#)])
        assertErrors("""
            [hosts."api.test"]
            trust = "pinned"
            pin = "public-key"
            \(Self.twoPins)
            """, [(1, #"hosts."api.test" has trust = "pinned" but no certificates: a hash alone cannot be an anchor; list the certificates"#)])
        assertErrors("""
            [default]
            trust = "pinned"
            """, [(1, #"default has trust = "pinned" but no certificates: a hash alone cannot be an anchor; list the certificates"#)])
        // trust = "none" with a CRL: nothing to check it against.
        assertErrors("""
            [hosts."api.test"]
            trust = "none"
            pin = "public-key"
            \(Self.twoPins)
            revocation = "ocsp-staple"
            """, [(5, #"hosts."api.test": revocation needs a verified chain, and trust = "none" verifies none"#)])
    }

    /// `expires` only where the chain and the host are verified by something other than the pins.
    func testExpiresOnlyWithCATrust() {
        let tail = #": expires is allowed only where the chain and the host are verified (trust = "system" or a list, validate_host = true): here the pins are the only protection"#
        assertErrors("""
            [hosts."api.test"]
            trust = "pinned"
            pin = "certificate"
            certificates = ["api.pem", "int-a.pem"]
            expires = 2040-01-01
            """, [(5, #"hosts."api.test""# + tail)])
        assertErrors("""
            [hosts."api.test"]
            trust = "none"
            pin = "public-key"
            \(Self.twoPins)
            expires = 2040-01-01
            """, [(5, #"hosts."api.test""# + tail)])
        assertErrors("""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            validate_host = false
            pin = "public-key"
            \(Self.twoPins)
            expires = 2040-01-01
            """, [(6, #"hosts."api.test""# + tail)])
        assertErrors("""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            expires = 2040-01-01
            """, [(3, #"hosts."api.test": expires needs pins to expire"#)])
        XCTAssertNoThrow(try pki.loadConfig("""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            pin = "public-key"
            \(Self.twoPins)
            expires = 2040-01-01
            """))
    }

    func testRevocationAndCRLs() {
        assertErrors("""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            revocation = "crl"
            """, [(1, #"hosts."api.test" has revocation = "crl" but no crls"#)])
        assertErrors("""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            revocation = "crl"
            crls = []
            """, [(1, #"hosts."api.test" has revocation = "crl" but no crls"#)])
        assertErrors("""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            crls = ["crl-int-a.pem"]
            """, [(3, #"hosts."api.test" gives crls but revocation is not "crl""#)])
        assertErrors("""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            revocation = "ocsp-staple"
            crls = ["crl-int-a.pem"]
            """, [(4, #"hosts."api.test" gives crls but revocation is not "crl""#)])
    }

    func testIncludeSubdomainsOnlyOnExactNames() {
        assertErrors("""
            [hosts."*.api.test"]
            include_subdomains = true
            """, [(2, #"hosts."*.api.test": include_subdomains applies to exact names only, not to "*." patterns or IP literals"#)])
        assertErrors("""
            [hosts."::1"]
            include_subdomains = true
            """, [(2, #"hosts."::1": include_subdomains applies to exact names only, not to "*." patterns or IP literals"#)])
        assertErrors("""
            [default]
            include_subdomains = true
            """, [(2, "include_subdomains has no meaning in [default]")])
    }

    // MARK: Files

    func testMissingFiles() {
        assertErrors("""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            pin = "public-key"
            certificates = [
              "api.pem",
              "missing.pem",
            ]
            """, [(6, #"pinned certificate "missing.pem" does not exist (\#(pki.path("missing.pem")))"#)])
        assertErrors("""
            [hosts."api.test"]
            trust = ["root-a.pem", "missing-root.pem"]
            """, [(2, #"anchor "missing-root.pem" does not exist (\#(pki.path("missing-root.pem")))"#)])
        assertErrors("""
            [default]
            trust = ["no-such-dir/"]
            """, [(2, #"anchor "no-such-dir/" does not exist…"#)])
        assertErrors("""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            revocation = "crl"
            crls = ["missing-crl.pem"]
            """, [(4, #"CRL file "missing-crl.pem" does not exist (\#(pki.path("missing-crl.pem")))"#)])
    }

    func testUnreadableFiles() throws {
        let workspace = try Workspace(pki)
        try workspace.write("garbage.pem", "not a certificate\n")
        try workspace.write("empty-dir/README.txt", "no certificates here\n")
        let text = """
            [hosts."api.test"]
            trust = ["garbage.pem"]
            [hosts."b.test"]
            trust = ["empty-dir"]
            [hosts."c.test"]
            trust = ["root-a.pem"]
            pin = "public-key"
            certificates = ["api.key", "api.pem"]
            [hosts."d.test"]
            trust = ["root-a.pem"]
            revocation = "crl"
            crls = ["api.pem"]
            """
        do {
            _ = try ConfigLoader.load(text: text, path: "w.toml", directory: workspace.directory, now: evaluationTime)
            XCTFail("loaded")
        } catch {
            XCTAssertEqual(error.diagnostics.map(\.description), [
                #"w.toml:2: anchor "garbage.pem" holds no PEM or DER certificate"#,
                #"w.toml:4: anchor directory "empty-dir" holds no .pem, .crt, .cer or .der file"#,
                #"w.toml:8: pinned certificate "api.key" holds a PRIVATE KEY block (block 1, line 1) where only CERTIFICATE blocks belong"#,
                #"w.toml:12: CRL file "api.pem" holds a CERTIFICATE block (block 1, line 1) where only X509 CRL blocks belong"#,
            ])
        }
    }

    /// A bundle is read whole or not at all: a junk block between certificates, a block of
    /// another type, bytes after a DER certificate or CRL are errors naming the file and the
    /// block, never a bundle silently cut short.
    func testNothingInACertificateOrCRLFileIsSkipped() throws {
        let workspace = try Workspace(pki)
        let api = String(decoding: try pki.bytes("api.pem"), as: UTF8.self)
        let intA = String(decoding: try pki.bytes("int-a.pem"), as: UTF8.self)
        let newKey = String(decoding: try pki.bytes("api-newkey.pem"), as: UTF8.self)
        let junk = "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n"
        let apiLines = api.split(separator: "\n").count
        try workspace.write("junk-bundle.pem", api + "# explanatory text is fine\n" + junk + newKey)
        try workspace.write("short-der.der", try pki.bytes("api.der") + [0x00])
        try workspace.write("key-bundle.pem", api + String(decoding: try pki.bytes("api.key"), as: UTF8.self))
        try workspace.write("crl-trailing.der", try pki.bytes("crl-int-a.der") + [0x30, 0x00])
        try workspace.write("ok-bundle.pem", "subject=CN=api.test\n" + api + "\n" + intA)
        let text = """
            [hosts."api.test"]
            trust = ["root-a.pem"]
            pin = "public-key"
            certificates = ["junk-bundle.pem"]
            [hosts."b.test"]
            trust = ["root-a.pem"]
            pin = "public-key"
            certificates = ["short-der.der"]
            [hosts."c.test"]
            trust = ["key-bundle.pem"]
            [hosts."d.test"]
            trust = ["root-a.pem"]
            revocation = "crl"
            crls = ["crl-trailing.der"]
            """
        do {
            _ = try ConfigLoader.load(text: text, path: "w.toml", directory: workspace.directory, now: evaluationTime)
            XCTFail("loaded")
        } catch {
            let messages = error.diagnostics.map(\.description)
            XCTAssertEqual(messages.count, 4, "\(messages)")
            XCTAssertTrue(messages[0].hasPrefix(#"w.toml:4: pinned certificate "junk-bundle.pem" holds a malformed PEM block (block 2, line \#(apiLines + 2))"#), messages[0])
            XCTAssertEqual(messages[1], #"w.toml:8: pinned certificate "short-der.der" holds no PEM or DER certificate"#)
            XCTAssertEqual(messages[2], #"w.toml:10: anchor "key-bundle.pem" holds a PRIVATE KEY block (block 2, line \#(apiLines + 1)) where only CERTIFICATE blocks belong"#)
            XCTAssertEqual(messages[3], #"w.toml:14: CRL file "crl-trailing.der" holds no PEM or DER CRL"#)
        }
        // Explanatory text around blocks is not a block: the whole bundle loads.
        XCTAssertEqual(try Certificate.parseAll(Array(String(decoding: try pki.bytes("api.pem"), as: UTF8.self).utf8) + Array("\n".utf8)
                                                + Array("subject=CN=x\n".utf8) + pki.bytes("int-a.pem")).count, 2)
        let bundle = try ConfigLoader.load(text: "[hosts.\"api.test\"]\ntrust = [\"ok-bundle.pem\"]\n", path: "w.toml",
                                           directory: workspace.directory, now: evaluationTime)
        guard case .anchors(_, let anchors) = bundle.policies.lookup(TargetHost("api.test")!).policy.trust else { return XCTFail("not anchors") }
        XCTAssertEqual(anchors.count, 2)
        // A junk block that a BEGIN line only resembles is still counted, and refused.
        XCTAssertThrowsError(try Certificate.parseAll(Array((api + "  -----BEGIN CERTIFICATE----\n" + intA).utf8))) { error in
            XCTAssertTrue("\(error)".hasPrefix("holds a malformed PEM block (block 2"), "\(error)")
        }
    }

    /// A text that nests deeper than 16 levels never reaches TOMLKit, whose parser and tree
    /// recurse as deep as it goes (100,000 levels overflow the stack): the issue's two shapes,
    /// and deep inline tables and arrays, are errors at their line; strings and comments do not
    /// count, and 16 levels are allowed.
    func testNestingDeeperThan16LevelsIsRefusedBeforeParsing() {
        let message = "nests deeper than 16 levels (tables, dotted key parts, inline tables and arrays count together); no pinproxy config needs more than 3"
        let deep = [
            ("[proxy]\n[" + Array(repeating: "a", count: 100_000).joined(separator: ".") + "]\n", 2, "a table header"),
            ("[[" + Array(repeating: "a", count: 17).joined(separator: " . ") + "]]\n", 1, "a table header"),
            ("# a comment\n" + Array(repeating: "a", count: 80_000).joined(separator: ".") + " = 1\n", 2, "a key"),
            ("[a.b.c.d.e.f.g.h]\ni.j.k.l.m.n.o.p.q = 1\n", 2, "a key"),
            ("x = " + String(repeating: "{ a = ", count: 17) + "1" + String(repeating: " }", count: 17) + "\n", 1, "a key"),
            ("x = " + String(repeating: "[", count: 17) + "1" + String(repeating: "]", count: 17) + "\n", 1, "an array"),
            ("s = \"\"\"\n[not.a.header]\n\"\"\"\nt = '''\n'''\n" + Array(repeating: "\"q\"", count: 17).joined(separator: ".") + " = 1\n",
             6, "a key"),
        ]
        for (text, line, what) in deep {
            XCTAssertEqual(pki.configErrors(text).map(\.description), ["\(pki.configPath):\(line): \(what) \(message)"],
                           String(text.prefix(80)))
        }
        // Sixteen levels, dots inside strings and comments, and floats are not too deep.
        let sixteen = "[" + Array(repeating: "a", count: 16).joined(separator: ".") + "]\n"
        XCTAssertEqual(pki.configErrors(sixteen).map(\.description), ["\(pki.configPath):1: unknown key a"])
        XCTAssertNoThrow(try pki.loadConfig("""
            [proxy]  # a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r
            request_timeout = 2.5
            [hosts."a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.test"]
            trust = ["root-a.pem"]
            """))
    }

    /// `trust = ["system", FILE]`: the system store plus the listed anchors; "system" alone in a
    /// list is the system store.
    func testTrustSystemPlusListedAnchors() throws {
        let config = try pki.loadConfig("""
            [hosts."a.test"]
            trust = ["system", "root-a.pem", "anchors"]
            [hosts."b.test"]
            trust = ["system"]
            """)
        guard case .systemAndListed(_, let listed) = config.policies.lookup(TargetHost("a.test")!).policy.trust else {
            return XCTFail("not system + listed")
        }
        XCTAssertEqual(listed, [try pki.certificate("root-a.pem"), try pki.certificate("root-a.pem")])
        guard case .system = config.policies.lookup(TargetHost("b.test")!).policy.trust else { return XCTFail("not system") }
        // The listed root verifies on top of whatever the system store holds.
        let verdict = try pki.evaluate(config: "[default]\ntrust = [\"system\", \"root-a.pem\"]\n", host: "api.test", chain: "api-chain.pem")
        XCTAssertEqual(verdict.summary, "allow")
    }

    // MARK: The stages

    /// The whole pipeline from bytes: errors for bytes that are not a config (never a throw or
    /// a trap), warnings for one that loads.
    func testDiagnosticsFromBytes() throws {
        let path = pki.configPath
        XCTAssertEqual(ConfigLoader.diagnostics(bytes: [0xFF, 0xFE], path: path, directory: pki.directory).map(\.description),
                       ["\(path): the config is not UTF-8 text"])
        XCTAssertEqual(ConfigLoader.diagnostics(bytes: Array("[hosts.\"a.test\"]\nenforce = \"no\"\n".utf8), path: path,
                                                directory: pki.directory).map(\.description),
                       [#"\#(path):2: hosts."a.test".enforce must be true or false, not a string"#])
        XCTAssertEqual(ConfigLoader.diagnostics(bytes: Array("[hosts.\"a.test\"]\naction = \"allow-insecure\"\n".utf8), path: path,
                                                directory: pki.directory).map(\.description),
                       [#"\#(path):2: warning: hosts."a.test" has action = "allow-insecure": its connections are not checked at all"#])
        XCTAssertEqual(ConfigLoader.diagnostics(bytes: [], path: path, directory: pki.directory), [])
    }

    /// The rules stage alone: a decoded policy in, findings out, no file read (the certificate
    /// named here does not exist, and no rule asks for it).
    func testRulesStageIsPure() {
        var policy = RawPolicy.unwritten(path: ["hosts", "a.test"], name: #"hosts."a.test""#, pattern: HostPattern("a.test"))
        policy.trust = .none
        policy.pinKind = .certificate
        policy.certificateFiles = ["/nonexistent/leaf.pem"]
        XCTAssertTrue(ConfigRules.check(policy, now: evaluationTime).isEmpty)
        policy.enforce = false
        XCTAssertEqual(ConfigRules.check(policy, now: evaluationTime).map(\.message),
                       [#"hosts."a.test" has enforce = false with trust = "none": the pins are its only protection, and report-only would drop them; remove enforce = false (or verify the chain and the host)"#])
        XCTAssertEqual(ConfigRules.check(policy, now: evaluationTime).map(\.keyPath), [["hosts", "a.test"]])
    }

    /// Relative paths resolve against the config's directory, never the working directory.
    func testRelativePathsResolveAgainstTheConfigDirectory() throws {
        let workspace = try Workspace(pki)
        try workspace.write("sub/only-here.pem", try pki.bytes("root-a.pem"))
        let path = try workspace.write("sub/pinproxy.toml", """
            [hosts."api.test"]
            trust = ["only-here.pem", "../root-b.pem"]
            """)
        let config = try ConfigLoader.load(path: path, now: evaluationTime)
        guard case .anchors(_, let anchors) = config.policies.lookup(TargetHost("api.test")!).policy.trust else {
            return XCTFail("not a list of anchors")
        }
        XCTAssertEqual(anchors, [try pki.certificate("root-a.pem"), try pki.certificate("root-b.pem")])
        // root-a.pem is beside the workspace's top, not beside the config.
        let other = try workspace.write("sub/other.toml", "[hosts.\"api.test\"]\ntrust = [\"root-a.pem\"]\n")
        XCTAssertThrowsError(try ConfigLoader.load(path: other, now: evaluationTime)) { error in
            XCTAssertEqual((error as? ConfigError)?.diagnostics.map(\.description),
                           [#"\#(other):2: anchor "root-a.pem" does not exist (\#(workspace.directory)/sub/root-a.pem)"#])
        }
        // An absolute path is taken as is.
        XCTAssertNoThrow(try pki.loadConfig("[hosts.\"api.test\"]\ntrust = [\"\(pki.path("root-a.pem"))\"]\n"))
    }

    func testMissingConfigFile() {
        XCTAssertThrowsError(try ConfigLoader.load(path: pki.path("no-such.toml"))) { error in
            XCTAssertEqual((error as? ConfigError)?.description, "\(pki.path("no-such.toml")): no such config file")
        }
    }

    /// A directory of anchors: every file ending .pem .crt .cer .der in any case, PEM or DER.
    func testAnchorDirectoriesWithMixedCaseExtensionsAndDER() throws {
        let config = try pki.loadConfig("[hosts.\"api.test\"]\ntrust = [\"anchors-mixed\"]\npin = \"certificate\"\ncertificates = [\"anchors-mixed/\", \"api.der\"]\n")
        let policy = config.policies.lookup(TargetHost("api.test")!).policy
        guard case .anchors(_, let anchors) = policy.trust else { return XCTFail("not a list of anchors") }
        let roots = [try pki.certificate("root-a.pem"), try pki.certificate("root-b.pem")]
        XCTAssertEqual(Set(anchors), Set(roots))
        XCTAssertEqual(anchors.count, 2)
        XCTAssertEqual(Set(policy.pinnedCertificates), Set(roots + [try pki.certificate("api.pem")]))
        XCTAssertEqual(Set(policy.pins), Set(["root-a", "root-b", "api"].map { Pin(pki.certPin($0))! }))

        let workspace = try Workspace(pki)
        try workspace.write("mixed/A.PEM", try pki.bytes("root-a.pem"))
        try workspace.write("mixed/b.Cer", try pki.bytes("int-a.pem"))
        try workspace.write("mixed/c.crt", try pki.bytes("api.der"))
        try workspace.write("mixed/notes.txt", "ignored\n")
        try workspace.write("mixed/key.pem.bak", "ignored\n")
        let loaded = try ConfigLoader.load(text: "[default]\ntrust = [\"mixed\"]\n", path: "m.toml", directory: workspace.directory, now: evaluationTime)
        guard case .anchors(_, let listed) = loaded.policies.defaultEntry.policy.trust else { return XCTFail("not a list of anchors") }
        XCTAssertEqual(Set(listed), Set(try ["root-a.pem", "int-a.pem", "api.pem"].map { try pki.certificate($0) }))
    }

    /// PEM bundles give every certificate, and a pin set from certificates holds each digest once.
    func testPinsFromCertificateBundles() throws {
        let config = try pki.loadConfig("""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            pin = "public-key"
            pins = ["{spki:api}"]
            certificates = ["api-chain.pem", "api-rotated.pem"]
            """)
        let policy = config.policies.lookup(TargetHost("api.test")!).policy
        XCTAssertEqual(policy.pins, [Pin(pki.spki("api"))!, Pin(pki.spki("int-a"))!])
        XCTAssertEqual(policy.pinnedCertificates.count, 3)
    }

    // MARK: Patterns

    func testInvalidPatterns() {
        for pattern in ["bad_name.test", "f*.example.com", "*.*.x", "a..test", "a.*.test", "*", "*.", "bücher.test",
                        "https://api.test", "api.test..", "-a.test", "api.test:443", "[127.0.0.1]", "1.2.3"] {
            assertErrors("""
                [proxy]
                allow_ports = [443]
                [hosts."\(pattern)"]
                action = "deny"
                """, [(3, "hosts.\"\(pattern)\"" + Self.patternHelp)])
        }
    }

    /// An empty pattern is named as TOML writes it, `hosts.""`.
    func testEmptyPattern() {
        assertErrors("""
            [hosts.""]
            action = "deny"
            """, [(1, #"hosts."""# + Self.patternHelp)])
    }

    /// Two keys that normalise to one pattern: the second is the error, pointing at the first.
    func testDuplicatePatternsAfterNormalisation() {
        assertErrors("""
            [hosts."api.test"]
            action = "deny"

            [hosts."API.test."]
            action = "deny"
            """, [(4, #"hosts."API.test." is the same pattern as hosts."api.test" (line 1) once normalised"#)])
        assertErrors("""
            [hosts."[::1]"]
            action = "deny"
            [hosts."::1"]
            action = "deny"
            [hosts."0:0::1"]
            action = "deny"
            """, [(3, #"hosts."::1" is the same pattern as hosts."[::1]" (line 1) once normalised"#),
                  (5, #"hosts."0:0::1" is the same pattern as hosts."[::1]" (line 1) once normalised"#)])
        assertErrors("""
            [hosts."*.Wild.test"]
            action = "deny"
            [hosts."*.wild.test."]
            action = "deny"
            """, [(3, #"hosts."*.wild.test." is the same pattern as hosts."*.Wild.test" (line 1) once normalised"#)])
    }

    // MARK: Every error, at its place

    /// Errors in several entries are all reported, in file order.
    func testEveryErrorIsReported() {
        assertErrors("""
            [hosts."a.test"]
            trust = "none"

            [hosts."b.test"]
            trust = ["root-a.pem"]
            frobnicate = 1
            mode = "relay"

            [hosts."bad_name"]
            """, [(1, #"hosts."a.test" has trust = "none" without pins: it would accept any certificate; add pin and pins (or certificates)"#),
                  (6, #"unknown key hosts."b.test".frobnicate"#),
                  (7, #"hosts."b.test".mode = "relay" is not one of "intercept", "tunnel""#),
                  (9, "hosts.bad_name" + Self.patternHelp)])
    }

    /// One pass finds every error: an entry that breaks a rule, or whose keys did not all decode,
    /// still has its files read, and every missing one is reported with the rest.
    func testRuleAndDecodeErrorsDoNotHideMissingFiles() {
        assertErrors("""
            [hosts."a.test"]
            trust = ["missing-a.pem"]
            validate_host = false

            [hosts."b.test"]
            pin = "public-key"
            pins = ["sha256/short"]
            certificates = ["missing-b.pem"]
            crls = ["missing-b.crl"]
            revocation = "crl"

            [hosts."c.test"]
            trust = ["root-a.pem"]
            """, [(1, #"hosts."a.test" has validate_host = false without pins: it would accept a certificate for any name; add pin and pins (or certificates)"#),
                  (2, #"anchor "missing-a.pem" does not exist (\#(pki.path("missing-a.pem")))"#),
                  (7, #"malformed pin "sha256/short""# + Self.pinHelp),
                  (8, #"pinned certificate "missing-b.pem" does not exist (\#(pki.path("missing-b.pem")))"#),
                  (9, #"CRL file "missing-b.crl" does not exist (\#(pki.path("missing-b.crl")))"#)])
    }

    /// Entry-level errors (combinations of keys) point at the entry's header, wherever its keys are.
    func testEntryLevelErrorsPointAtTheHeader() {
        assertErrors("""
            [proxy]
            allow_ports = [443]

            # pinned, but by nothing
            [hosts."api.test"]
            trust = ["root-a.pem"]

            pin = "public-key"
            [hosts."b.test"]
            validate_host = false
            trust = ["root-a.pem"]
            """, [(5, #"hosts."api.test" has pin = "public-key" but no pins and no certificates"#),
                  (9, #"hosts."b.test" has validate_host = false without pins: it would accept a certificate for any name; add pin and pins (or certificates)"#)])
    }

    // MARK: How host entries are written

    /// Entries with their own header, in an inline table and as dotted keys all load, in file
    /// order, each with its line (the loader leaves the index's header list for TOMLKit's keys).
    func testHostEntriesWrittenEveryWay() throws {
        let config = try pki.loadConfig("""
            [hosts."a.test"]
            action = "deny"

            [hosts]
            "b.test" = { action = "deny", include_subdomains = true }
            "c.test".action = "deny"
            """)
        let entries = config.policies.entries
        XCTAssertEqual(entries.map(\.name), [#"hosts."a.test""#, #"hosts."b.test""#, #"hosts."c.test""#])
        XCTAssertEqual(entries.map(\.line), [1, 5, 6])
        XCTAssertEqual(config.policies.lookup(TargetHost("x.b.test")!).name, #"hosts."b.test""#)
        XCTAssertEqual(config.policies.lookup(TargetHost("c.test")!).policy.action, .deny)
        assertErrors("""
            [hosts."a.test"]
            action = "deny"
            [hosts]
            "A.test" = { action = "deny" }
            """, [(4, #"hosts."A.test" is the same pattern as hosts."a.test" (line 1) once normalised"#)])
        // An entry written as dotted keys has no header: its first key stands for it.
        assertErrors("""
            [hosts]
            "a.test".action = "deny"

            "b.test".trust = ["root-a.pem"]
            "b.test".pin = "public-key"
            """, [(4, #"hosts."b.test" has pin = "public-key" but no pins and no certificates"#)])
    }

    /// A line that looks like a host header but sits inside a string neither hides an entry
    /// nor makes one up, even when it names another entry.
    func testHeaderLikeLinesInsideStrings() throws {
        // The comment's triple quote looks, to a line scanner, like the start of a multi-line
        // string, and the real multi-line string below like its end.
        for fake in ["x.test", "fake.test"] {
            let config = try pki.loadConfig(#"""
                [hosts."x.test"]
                action = "deny"
                # a note: """
                [hosts."y.test"]
                action = "deny"
                [proxy]
                ca_dir = """
                [hosts."\#(fake)"]
                """
                """#)
            XCTAssertEqual(config.policies.entries.map(\.name), [#"hosts."x.test""#, #"hosts."y.test""#], fake)
            XCTAssertEqual(config.policies.lookup(TargetHost("y.test")!).name, #"hosts."y.test""#, fake)
            XCTAssertEqual(config.policies.lookup(TargetHost("fake.test")!).name, "default", fake)
        }
    }

    /// TOMLKit reads the text and every key and string through C, which ends them at U+0000:
    /// a NUL byte or escape anywhere is an error, never a silent cut.
    func testNULIsRejected() throws {
        let message = "the config holds U+0000 (NUL), as a byte or as an escape: pinproxy cannot read past it"
        assertErrors("[hosts.\"a.test\"]\naction = \"deny\"\u{0}\n[hosts.\"b.test\"]\naction = \"deny\"\n", [(2, message)])
        for escape in [#"\u0000"#, #"\U00000000"#, #"\x00"#] {
            assertErrors("""
                [hosts."a.test"]
                action = "deny"

                [hosts."b.test\(escape)"]
                action = "deny"
                """, [(4, message)])
            assertErrors("""
                [hosts."a.test"]
                action = "deny\(escape)x"
                """, [(2, message)])
        }
        // An escaped backslash followed by the text u0000 is no NUL.
        let config = try pki.loadConfig(#"""
            [proxy]
            ca_dir = "ca\\u0000"
            """#)
        XCTAssertEqual(config.proxy.caDirectory.map { URL(fileURLWithPath: $0).lastPathComponent }, #"ca\u0000"#)
    }

    /// Escapes in a quoted key are read as TOML reads them, so diagnostics find its line.
    func testEscapedKeysAreIndexed() {
        assertErrors("""
            [default]
            trust = ["root-a.pem"]

            [hosts."\\u0061pi.test"]
            min_tls = "1.1"
            """, [(5, #"hosts."api.test".min_tls = "1.1" is not one of "1.2", "1.3""#)])
    }

    /// Enough entries to be parsed on several cores: they come back in file order, with every
    /// error and warning at its line, and duplicates found across the whole file.
    func testLargeConfigIsParsedInFileOrder() throws {
        let count = 5_000
        func entry(_ i: Int) -> String {
            switch i % 3 {
            case 0: return "[hosts.\"h\(i).test\"]\ntrust = [\"root-a.pem\"]\npin = \"public-key\"\n\(Self.twoPins)\n"
            case 1: return "[hosts.\"*.h\(i).test\"]\nports = [443, 8443]\n"
            default: return "[hosts.\"h\(i).test\"]\ninclude_subdomains = true\naction = \"deny\"\n"
            }
        }
        let entries = (0..<count).map(entry)
        /// The line each entry's header is on.
        func headerLines(_ entries: [String]) -> [Int] {
            entries.reduce(into: [1]) { $0.append($0.last! + $1.split(separator: "\n").count) }.dropLast()
        }
        let lines = headerLines(entries)
        let config = try pki.loadConfig(entries.joined())
        XCTAssertEqual(config.policies.entries.count, count)
        XCTAssertEqual(config.policies.entries.map(\.line), lines)
        XCTAssertEqual(config.policies.entries.last?.name, #"hosts."*.h4999.test""#)
        XCTAssertEqual(config.policies.lookup(TargetHost("a.h4997.test")!).name, #"hosts."h4997.test""#)
        XCTAssertEqual(config.policies.lookup(TargetHost("a.h4996.test")!).name, #"hosts."*.h4996.test""#)
        XCTAssertEqual(config.policies.lookup(TargetHost("h4998.test")!).policy.pins.count, 2)

        // Errors near both ends, a warning in the middle, and a pattern written again at the end.
        var broken = entries
        broken[2] = "[hosts.\"h2.test\"]\naction = \"block\"\ninclude_subdomains = true\n"
        broken[2_500] = "[hosts.\"bad_name\"]\naction = \"deny\"\n"
        broken[4_998] = "[hosts.\"H0.TEST.\"]\naction = \"deny\"\ninclude_subdomains = 1\n"
        let errors = pki.configErrors(broken.joined())
        let brokenLines = headerLines(broken)
        XCTAssertEqual(errors.map(\.line), [brokenLines[2] + 1, brokenLines[2_500], brokenLines[4_998], brokenLines[4_998] + 2])
        XCTAssertEqual(errors.map(\.message), [
            #"hosts."h2.test".action = "block" is not one of "verify", "deny", "allow-insecure""#,
            "hosts.bad_name" + Self.patternHelp,
            #"hosts."H0.TEST." is the same pattern as hosts."h0.test" (line 1) once normalised"#,
            #"hosts."H0.TEST.".include_subdomains must be true or false, not an integer"#,
        ])
        var warned = entries
        warned[3_000] = "[hosts.\"h3000.test\"]\ntrust = [\"root-a.pem\"]\npin = \"public-key\"\npins = [\"{spki:api}\"]\n"
        XCTAssertEqual(pki.configWarnings(warned.joined()).map(\.line), [lines[3_000]])
    }

    // MARK: Warnings

    func testWarnings() {
        assertWarnings("""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            pin = "public-key"
            pins = ["{spki:api}"]
            [hosts."open.test"]
            action = "allow-insecure"
            """, [(1, #"hosts."api.test" has a single pin and no backup: add the pin of a backup key so that a key change does not lock clients out"#),
                  (6, #"hosts."open.test" has action = "allow-insecure": its connections are not checked at all"#)])
        // One pinned certificate counts as one pin.
        assertWarnings("""
            [hosts."self.test"]
            trust = "pinned"
            pin = "certificate"
            certificates = ["self.pem"]
            """, [(1, #"hosts."self.test" has a single pin and no backup: add the pin of a backup key so that a key change does not lock clients out"#)])
        assertWarnings("""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            pin = "public-key"
            \(Self.twoPins)
            """, [])
    }

    /// `expires` is judged at the loader's `now`: passed, within 30 days, or neither.
    func testExpiresWarnings() {
        let entry = { (expires: String) in
            "[hosts.\"api.test\"]\ntrust = [\"root-a.pem\"]\npin = \"public-key\"\n\(Self.twoPins)\nexpires = \(expires)\n"
        }
        assertWarnings(entry("2026-05-31"), [(5, #"hosts."api.test": expires = 2026-05-31 has passed: its pins are no longer enforced"#)])
        assertWarnings(entry("2026-06-01"), [(5, #"hosts."api.test": expires = 2026-06-01 is within 30 days: its pins stop being enforced then"#)])
        assertWarnings(entry("2026-06-29"), [(5, #"hosts."api.test": expires = 2026-06-29 is within 30 days: its pins stop being enforced then"#)])
        assertWarnings(entry("2026-07-01"), [])
        assertWarnings(entry("2026-07-01"), [(5, #"hosts."api.test": expires = 2026-07-01 is within 30 days: its pins stop being enforced then"#)],
                       now: date("2026-06-15T00:00:00Z"))
    }

    /// Pinned certificates and anchors that expire within 30 days of `now`, or have expired.
    func testCertificateExpiryWarnings() throws {
        let text = """
            [hosts."api.test"]
            trust = ["root-a.pem"]
            pin = "certificate"
            certificates = ["api.pem", "int-a.pem"]
            """
        let soon = "expires on 2045-01-01T00:00:00Z, within 30 days"
        let api = try pki.certificate("api.pem").subject, intA = try pki.certificate("int-a.pem").subject
        let rootA = try pki.certificate("root-a.pem").subject
        assertWarnings(text, [])
        assertWarnings(text, [(2, #"hosts."api.test": anchor \#(rootA) "# + soon),
                              (4, #"hosts."api.test": pinned certificate \#(api) "# + soon),
                              (4, #"hosts."api.test": pinned certificate \#(intA) "# + soon)],
                       now: date("2044-12-15T00:00:00Z"))
        assertWarnings(text, [(2, #"hosts."api.test": anchor \#(rootA) expired on 2045-01-01T00:00:00Z"#),
                              (4, #"hosts."api.test": pinned certificate \#(api) expired on 2045-01-01T00:00:00Z"#),
                              (4, #"hosts."api.test": pinned certificate \#(intA) expired on 2045-01-01T00:00:00Z"#)],
                       now: date("2045-02-01T00:00:00Z"))
        // The expired leaf of the standard set, pinned: warned at any time after 2015.
        let expired = try pki.certificate("expired.pem").subject
        assertWarnings("""
            [hosts."api.test"]
            trust = ["root-a.pem"]
            pin = "certificate"
            certificates = ["expired.pem", "api.pem"]
            """, [(4, #"hosts."api.test": pinned certificate \#(expired) expired on 2015-01-01T00:00:00Z"#)])
    }

    // MARK: Valid configs

    func testEmptyFileIsValid() throws {
        let config = try pki.loadConfig("")
        XCTAssertTrue(config.policies.entries.isEmpty)
        XCTAssertTrue(config.warnings.isEmpty)
        XCTAssertEqual(config.policies.defaultEntry.name, "default")
        XCTAssertEqual(config.policies.defaultEntry.line, 0)
        XCTAssertEqual(config.policies.defaultEntry.policy.trust.name, "system")
        XCTAssertEqual(config.policies.defaultEntry.policy.action, .verify)
        XCTAssertEqual(config.proxy.allowPorts, [443])
        XCTAssertEqual(config.proxy.listen.map(\.description), ["127.0.0.1:3128"])
        XCTAssertEqual(config.proxy.reportRateLimit, 600)
        XCTAssertEqual(config.proxy.reportFileMaxBytes, 64 << 20)
    }

    /// Every key the spec names, with a value, loads.
    func testEveryKeyLoads() throws {
        let config = try pki.loadConfig("""
            [proxy]
            listen = ["127.0.0.1:3128", "[::1]:3128"]
            allow_ports = [443, 8443]
            block_private_destinations = false
            metrics_listen = "127.0.0.1:9128"
            log_format = "json"
            workers = 2
            request_timeout = 5
            dns_timeout = 2.5
            connect_timeout = 3
            handshake_timeout = 4
            idle_timeout = 60
            drain_timeout = 1
            max_connections = 100
            relay_buffer_bytes = 65536
            report_rate_limit = 60
            report_file_max_bytes = 1048576

            [resolve]
            "api.test" = "127.0.0.1"
            "dual.test" = ["127.0.0.1", "::1"]

            [default]
            action = "verify"
            trust = ["anchors"]
            validate_host = true
            pin = "none"
            enforce = true
            ports = [443]
            min_tls = "1.2"
            mode = "intercept"
            revocation = "off"

            [hosts."api.test"]
            action = "verify"
            trust = ["root-a.pem", "anchors", "anchors-mixed"]
            validate_host = true
            pin = "public-key"
            \(Self.twoPins)
            certificates = ["api.pem", "api-chain.pem", "anchors"]
            enforce = true
            expires = 2040-01-01
            include_subdomains = true
            ports = [443, 8443]
            min_tls = "1.3"
            mode = "intercept"
            revocation = "crl"
            crls = ["crl-int-a.pem", "crl-int-a.der"]
            """)
        XCTAssertEqual(config.warnings, [])
        XCTAssertEqual(config.proxy.listen.map(\.description), ["127.0.0.1:3128", "[::1]:3128"])
        XCTAssertEqual(config.proxy.logFormat, .json)
        XCTAssertEqual(config.proxy.dnsTimeout, 2.5)
        XCTAssertEqual(config.proxy.reportRateLimit, 60)
        XCTAssertEqual(config.proxy.reportFileMaxBytes, 1_048_576)
        XCTAssertEqual(config.resolve["dual.test"]?.map(\.description), ["127.0.0.1", "::1"])
        let entry = config.policies.lookup(TargetHost("x.api.test")!)
        XCTAssertEqual(entry.name, #"hosts."api.test""#)
        XCTAssertEqual(entry.line, 34)
        XCTAssertEqual(entry.policy.minTLS, .v1_3)
        XCTAssertEqual(entry.policy.expires, "2040-01-01")
        XCTAssertEqual(entry.policy.pinsExpireAt, date("2040-01-02T00:00:00Z"))
        XCTAssertEqual(entry.policy.revocation.name, "crl")
        XCTAssertEqual(entry.policy.ports, [443, 8443])
    }

    /// The built-in config loads (the empty text: every declared default), and so does the
    /// shipped reference, which writes every key commented out.
    func testDefaultConfigIsTheShippedFile() throws {
        let config = try ConfigLoader.loadEmbedded(now: evaluationTime)
        XCTAssertEqual(config.path, "<embedded>")
        XCTAssertTrue(config.warnings.isEmpty)
        XCTAssertTrue(config.policies.entries.isEmpty)
        XCTAssertEqual(config.policies.defaultEntry.policy.trust.name, "system")
        XCTAssertEqual(config.proxy.listen.map(\.description), ["127.0.0.1:3128"])
        XCTAssertNoThrow(try ConfigLoader.load(path: packageRoot.appendingPathComponent("config/pinproxy.toml").path, now: evaluationTime))
    }
}
