import Foundation
import PinproxyInterop
import PinproxyPolicy
import XCTest

/// `TargetHost`, `HostPattern` and `Pin` parsing: the values every lookup and pin check rests on.
final class HostTests: XCTestCase {
    func testNamesAreNormalised() {
        XCTAssertEqual(TargetHost("API.Example.TEST"), .name("api.example.test"))
        XCTAssertEqual(TargetHost("api.example.test."), .name("api.example.test"))
        XCTAssertEqual(TargetHost("localhost"), .name("localhost"))
        XCTAssertEqual(TargetHost("xn--bcher-kva.test"), .name("xn--bcher-kva.test"))
        XCTAssertEqual(TargetHost("1password.test"), .name("1password.test"))
        XCTAssertEqual(TargetHost("a-b.test"), .name("a-b.test"))
        XCTAssertEqual(TargetHost("a.test")?.serverName, "a.test")
        XCTAssertEqual(TargetHost("A.test.")?.description, "a.test")
    }

    /// Anything that is not LDH ASCII or an IP literal is refused.
    func testNonLDHNamesAreRejected() {
        let label63 = String(repeating: "a", count: 63)
        for text in ["", ".", "a..test", ".a.test", "a.test..", "bad_name.test", "has space.test", "bücher.test", "-a.test",
                     "a-.test", "*.test", "a.*.test", "https://a.test", "a.test:443", "a/b", "1.2.3", "10.0.0.256",
                     "127.0.0.01", "[127.0.0.1]", "[a.test]", "\(label63)a.test", "a.test\u{0}", "a\u{2024}test"] {
            XCTAssertNil(TargetHost(text), "\(text.debugDescription) must not be a host")
        }
        XCTAssertNotNil(TargetHost("\(label63).test"))
        // 253 characters at most (without the trailing dot).
        let long = Array(repeating: String(repeating: "a", count: 49), count: 5).joined(separator: ".") + ".test"
        XCTAssertEqual(long.count, 254)
        XCTAssertNil(TargetHost(long))
        XCTAssertNotNil(TargetHost(String(long.dropFirst())))
        XCTAssertNotNil(TargetHost(String(long.dropFirst()) + "."))
    }

    /// IPv6 with or without brackets, any spelling, is one address; IPv4 likewise.
    func testIPLiterals() {
        let loopback = TargetHost("::1")
        XCTAssertEqual(TargetHost("[::1]"), loopback)
        XCTAssertEqual(TargetHost("0:0::1"), loopback)
        XCTAssertEqual(TargetHost("0000:0000:0000:0000:0000:0000:0000:0001"), loopback)
        XCTAssertEqual(loopback?.description, "[::1]")
        XCTAssertNil(loopback?.serverName)
        XCTAssertEqual(TargetHost("[2001:DB8::1]")?.description, "[2001:db8::1]")
        XCTAssertEqual(TargetHost("127.0.0.1")?.description, "127.0.0.1")
        XCTAssertNotEqual(TargetHost("127.0.0.1"), TargetHost("127.0.0.2"))
        XCTAssertNil(TargetHost("[::1"))
        XCTAssertNil(TargetHost("::1]"))
        XCTAssertNil(TargetHost("[::1%eth0]"))
        // C would stop reading at a NUL and see a valid address.
        XCTAssertNil(TargetHost("::1\u{0}x"))
        XCTAssertNil(TargetHost("[::1\u{0}x]"))
        XCTAssertNil(TargetHost("127.0.0.1\u{0}x"))
        XCTAssertNil(TargetHost("::g"))
        if case .ip(let address) = TargetHost("[::1]") {
            XCTAssertEqual(address.bytes, Array(repeating: 0, count: 15) + [1])
            XCTAssertEqual(address.description, "::1")
        } else {
            XCTFail("[::1] is an IP literal")
        }
    }

    func testPatterns() {
        XCTAssertEqual(HostPattern("API.test."), .exact("api.test"))
        XCTAssertEqual(HostPattern("*.Example.com"), .wildcard(parent: "example.com"))
        XCTAssertEqual(HostPattern("*.example.com")?.description, "*.example.com")
        XCTAssertEqual(HostPattern("[::1]"), HostPattern("0:0::1"))
        XCTAssertEqual(HostPattern("[::1]")?.description, "::1")
        if case .ip = HostPattern("10.1.2.3") {} else { XCTFail("10.1.2.3 is an IP pattern") }
        for text in ["f*.example.com", "*.*.x", "*", "*.", "a.*.test", "*a.test", "*.a..test", "**.a.test", ".*.a.test",
                     "*.127.0.0.1", "*.[::1]", "", "a..test", "bad_name.test", "bücher.test"] {
            XCTAssertNil(HostPattern(text), "\(text.debugDescription) must not be a pattern")
        }
    }

    // MARK: Pins

    func testPinRoundTrip() {
        for byte: UInt8 in [0x00, 0x3E, 0xFB, 0xFF] {
            let digest = [UInt8](repeating: byte, count: 31) + [0x5A]
            let pin = Pin(digest: digest)
            let text = pin.description
            XCTAssertTrue(text.hasPrefix("sha256/"))
            XCTAssertEqual(text.count, 7 + 44)
            XCTAssertEqual(Pin(text), pin)
            XCTAssertEqual(Pin(text)?.digest, digest)
        }
        // A known value: SHA-256 of the empty string.
        let empty = Pin("sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=")
        XCTAssertEqual(empty?.digest, SHA256.hash([]))
        XCTAssertEqual(empty?.description, "sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=")
    }

    func testMalformedPinsAreRejected() {
        let digest = Data(repeating: 0xFB, count: 32).base64EncodedString()  // holds '+' and '/'
        XCTAssertTrue(digest.contains("+") && digest.contains("/"))
        let unpadded = digest.replacingOccurrences(of: "=", with: "")
        let urlSafe = digest.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        let zeros = String(Pin(digest: [UInt8](repeating: 0, count: 32)).description.dropFirst(7).dropLast(2))
        var malformed: [String] = ["sha1/" + Data(repeating: 1, count: 20).base64EncodedString()]
        malformed += ["SHA256/", "sha256:", "sha-256/", ""].map { $0 + digest }
        malformed += ["sha256/" + unpadded, "sha256/" + urlSafe]
        malformed += [31, 33, 48].map { "sha256/" + Data(repeating: 1, count: $0).base64EncodedString() }
        malformed += ["sha256/" + digest + " ", " sha256/" + digest, "sha256/ " + String(digest.dropLast())]
        malformed += ["sha256/", "", "sha256/!" + String(digest.dropFirst())]
        // Not canonical: the last character carries non-zero padding bits (…A= is canonical, …B= is not).
        malformed.append("sha256/" + zeros + "B=")
        // The right length, but `=` or a space inside, or two `=` at the end.
        malformed += ["=", " ", "\n"].map { "sha256/" + digest.prefix(20) + $0 + digest.dropFirst(21) }
        malformed.append("sha256/" + digest.dropLast(2) + "==")
        XCTAssertNotNil(Pin("sha256/" + digest))
        XCTAssertNotNil(Pin("sha256/" + String(repeating: "A", count: 43) + "="))
        for text in malformed {
            XCTAssertNil(Pin(text), "\(text.debugDescription) must not be a pin")
        }
    }

    /// The digests pins are made of, against the generator's own (Python) computation.
    func testCertificateDigestsMatchTheGenerator() throws {
        let pki = try PKI.shared()
        for stem in ["api", "int-a", "root-a", "root-b", "api-rsa", "self"] {
            let certificate = try pki.certificate(stem + ".pem")
            XCTAssertEqual(Pin(digest: certificate.publicKeySHA256).description, pki.spki(stem), stem)
            XCTAssertEqual(Pin(digest: certificate.certificateSHA256).description, pki.certPin(stem), stem)
        }
        // Same key, new certificate: same public-key pin, new certificate pin.
        XCTAssertEqual(pki.spki("api"), pki.spki("api-rotated"))
        XCTAssertNotEqual(pki.certPin("api"), pki.certPin("api-rotated"))
        XCTAssertEqual(pki.spki("self"), pki.spki("self-rekeyed"))
        XCTAssertNotEqual(pki.spki("api"), pki.spki("api-newkey"))
    }
}
