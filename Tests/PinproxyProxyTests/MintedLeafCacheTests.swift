import Foundation
import PinproxyCore
import XCTest
import PinproxyInterop
import PinproxyPolicy
@testable import PinproxyProxy

/// The bounds of the minted-leaf cache: a flood of new names never holds more than its count
/// or its bytes, and the leaves in use stay.
final class MintedLeafCacheTests: XCTestCase {
    private static let leaf: LocalCA.MintedLeaf = {
        let key = try! PrivateKey.generateP256()
        let certificate = try! CertificateBuilder.makeCA(commonName: "cache test", key: key, notBefore: Date(), notAfter: Date().addingTimeInterval(3_600))
        return LocalCA.MintedLeaf(certificate: certificate, key: key)
    }()

    private func host(_ index: Int) -> TargetHost {
        TargetHost("host\(index).test")!
    }

    func testCountBoundKeepsTheLeafInUse() {
        var cache = MintedLeafCache(maximumCount: 10, maximumBytes: 1 << 30)
        cache.insert(Self.leaf, bytes: 100, for: host(0))
        for index in 1...1_000 {
            cache.insert(Self.leaf, bytes: 100, for: host(index))
            XCTAssertLessThanOrEqual(cache.count, 10)
            XCTAssertNotNil(cache.leaf(for: host(0)), "the leaf used all along was evicted at \(index)")
        }
        XCTAssertNotNil(cache.leaf(for: host(1_000)))
        XCTAssertNil(cache.leaf(for: host(1)))
        XCTAssertEqual(cache.totalBytes, cache.count * 100)
    }

    func testByteBound() {
        var cache = MintedLeafCache(maximumCount: 10_000, maximumBytes: 10_000)
        for index in 0..<500 {
            cache.insert(Self.leaf, bytes: 1_000 + index % 300, for: host(index))
            XCTAssertLessThanOrEqual(cache.totalBytes, 10_000)
        }
        XCTAssertGreaterThan(cache.count, 0)
    }

    func testReplacingAHostCountsItOnce() {
        var cache = MintedLeafCache(maximumCount: 10, maximumBytes: 10_000)
        cache.insert(Self.leaf, bytes: 700, for: host(1))
        cache.insert(Self.leaf, bytes: 900, for: host(1))
        XCTAssertEqual(cache.count, 1)
        XCTAssertEqual(cache.totalBytes, 900)
    }
}
