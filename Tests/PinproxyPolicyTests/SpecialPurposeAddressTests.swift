import XCTest
import PinproxyCore
import PinproxyPolicy

/// `IPAddress.specialPurposeBlock`, the classifier behind `block_private_destinations`: every
/// block of the IANA special-purpose registries, at its first and last address, with the
/// public neighbours on either side left alone.
final class SpecialPurposeAddressTests: XCTestCase {
    /// (first address, last address, public address just outside or nil) for each block.
    static let ipv4: [(String, String, [String])] = [
        ("0.0.0.0", "0.255.255.255", ["1.0.0.0"]),
        ("10.0.0.0", "10.255.255.255", ["9.255.255.255", "11.0.0.0"]),
        ("100.64.0.0", "100.127.255.255", ["100.63.255.255", "100.128.0.0"]),
        ("127.0.0.0", "127.255.255.255", ["126.255.255.255", "128.0.0.0"]),
        ("169.254.0.0", "169.254.255.255", ["169.253.255.255", "169.255.0.0"]),
        ("172.16.0.0", "172.31.255.255", ["172.15.255.255", "172.32.0.0"]),
        ("192.0.0.0", "192.0.0.255", ["191.255.255.255", "192.0.1.0"]),
        ("192.0.2.0", "192.0.2.255", ["192.0.1.255", "192.0.3.0"]),
        ("192.31.196.0", "192.31.196.255", ["192.31.195.255", "192.31.197.0"]),
        ("192.52.193.0", "192.52.193.255", ["192.52.192.255", "192.52.194.0"]),
        ("192.88.99.0", "192.88.99.255", ["192.88.98.255", "192.88.100.0"]),
        ("192.168.0.0", "192.168.255.255", ["192.167.255.255", "192.169.0.0"]),
        ("192.175.48.0", "192.175.48.255", ["192.175.47.255", "192.175.49.0"]),
        ("198.18.0.0", "198.19.255.255", ["198.17.255.255", "198.20.0.0"]),
        ("198.51.100.0", "198.51.100.255", ["198.51.99.255", "198.51.101.0"]),
        ("203.0.113.0", "203.0.113.255", ["203.0.112.255", "203.0.114.0"]),
        ("224.0.0.0", "239.255.255.255", ["223.255.255.255"]),
        ("240.0.0.0", "255.255.255.254", []),
        ("255.255.255.255", "255.255.255.255", []),
    ]

    static let ipv6: [(String, String, [String])] = [
        ("::", "::ffff:ffff", []),
        ("64:ff9b:1::", "64:ff9b:1:ffff:ffff:ffff:ffff:ffff", []),
        ("100::", "100::ffff:ffff:ffff:ffff", []),
        ("100:0:0:1::", "100:0:0:1:ffff:ffff:ffff:ffff", []),
        ("2001::", "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", ["2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2001:200::1"]),
        ("2001:2::1", "2001:3::1", []),          // benchmarking, AMT (inside 2001::/23)
        ("2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", ["2001:db7:ffff::1", "2001:db9::1"]),
        ("2620:4f:8000::", "2620:4f:8000:ffff:ffff:ffff:ffff:ffff", ["2620:4f:7fff::1", "2620:4f:8001::1"]),
        ("3fff::", "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", ["3ffe:ffff::1", "3fff:1000::1"]),
        ("5f00::", "5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff", []),
        ("fc00::", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", []),
        ("fe80::", "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", []),
        ("fec0::", "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", []),
        ("ff00::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", []),
        // Outside 2000::/3 (global unicast), with the reserved space around the blocks above.
        ("::1:0:0:0", "1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ["2000::1"]),
        ("4000::", "7fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ["3fff:1000::1"]),
        ("8000::", "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", []),
        ("64:ff9b:2::1", "5f01::1", []),
    ]

    func testEveryIPv4BlockIsSpecialAndItsNeighboursAreNot() throws {
        try check(Self.ipv4)
    }

    func testEveryIPv6BlockIsSpecialAndItsNeighboursAreNot() throws {
        try check(Self.ipv6)
    }

    func testEveryListedBlockIsCovered() {
        // Each block must be exercised above, by an address it holds.
        let tested = (Self.ipv4 + Self.ipv6).map(\.0).compactMap(IPAddress.init)
        for block in IPAddress.specialPurposeIPv4 + IPAddress.specialPurposeIPv6 {
            XCTAssertTrue(tested.contains(where: block.contains), "no test for \(block)")
        }
    }

    func testIPv6FormsEmbeddingIPv4AreJudgedByTheIPv4Address() throws {
        let special = ["::ffff:192.0.2.1", "::ffff:0:198.51.100.7", "64:ff9b::203.0.113.9", "2002:c058:6301::1",
                       "::ffff:10.1.2.3", "64:ff9b::127.0.0.1", "2002:c000:0201::1", "::ffff:255.255.255.255"]
        for text in special {
            let address = try XCTUnwrap(IPAddress(text))
            XCTAssertNotNil(address.specialPurposeBlock, text)
        }
        let ordinary = ["::ffff:8.8.8.8", "::ffff:0:1.1.1.1", "64:ff9b::9.9.9.9", "2002:0808:0808::1"]
        for text in ordinary {
            let address = try XCTUnwrap(IPAddress(text))
            XCTAssertNil(address.specialPurposeBlock, text)
        }
    }

    func testOrdinaryUnicastIsNotSpecial() throws {
        for text in ["1.1.1.1", "8.8.8.8", "93.184.216.34", "2606:4700::1111", "2a00:1450:4001::1", "2001:4860:4860::8888"] {
            let address = try XCTUnwrap(IPAddress(text))
            XCTAssertNil(address.specialPurposeBlock, text)
        }
    }

    private func check(_ table: [(String, String, [String])]) throws {
        for (first, last, outside) in table {
            for text in [first, last] {
                let address = try XCTUnwrap(IPAddress(text), text)
                XCTAssertNotNil(address.specialPurposeBlock, "\(text) is special-purpose")
            }
            for text in outside {
                let address = try XCTUnwrap(IPAddress(text), text)
                XCTAssertNil(address.specialPurposeBlock, "\(text) is ordinary unicast, not \(address.specialPurposeBlock!)")
            }
        }
    }
}
