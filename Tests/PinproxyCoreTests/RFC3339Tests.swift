import Foundation
import PinproxyCore
import XCTest

/// `rfc3339` and `rfc3339Milliseconds` work the date out by hand (no formatter object): these
/// check them against Foundation's formatter, including the edges hand-written formatting gets
/// wrong (zero padding, leap days, times before 1970, the ends of the years it writes).
final class RFC3339Tests: XCTestCase {
    /// Milliseconds since 1970: the epoch, single-digit fields, 999 ms, leap days (2000 and 2024),
    /// the last day of a century that is no leap year (2100), far ahead, and before 1970 (where
    /// truncation must go towards the earlier millisecond; not before 1582, where Foundation
    /// turns Julian).
    private let instants: [Int64] = [0, 1, 5, 999, 1_000, 951_782_400_006, 1_709_164_800_000, 1_767_225_599_999,
                                     1_795_000_000_123, 4_107_456_000_000, 4_107_542_399_999, 4_107_542_400_000,
                                     253_402_300_799_999,
                                     -1, -999, -1_000, -86_400_001, -2_203_891_200_000]

    /// `write` of every instant is what Foundation's formatter writes (with or without
    /// `fractional` seconds).
    private func assertMatchesFoundation(_ write: (Date) -> String, fractional: Bool, line: UInt = #line) {
        let reference = ISO8601DateFormatter()
        reference.formatOptions = fractional ? [.withInternetDateTime, .withFractionalSeconds] : [.withInternetDateTime]
        reference.timeZone = TimeZone(identifier: "UTC")
        for milliseconds in instants {
            let date = Date(timeIntervalSince1970: Double(milliseconds) / 1000)
            XCTAssertEqual(write(date), reference.string(from: date), "at \(milliseconds) ms", line: line)
        }
    }

    func testMillisecondsMatchFoundationsISO8601() {
        assertMatchesFoundation(rfc3339Milliseconds, fractional: true)
        XCTAssertEqual(rfc3339Milliseconds(Date(timeIntervalSince1970: 1_767_315_845.006)), "2026-01-02T01:04:05.006Z")
    }

    func testSecondsMatchFoundationsISO8601() {
        assertMatchesFoundation(rfc3339, fractional: false)
        XCTAssertEqual(rfc3339(Date(timeIntervalSince1970: 1_767_315_845.999)), "2026-01-02T01:04:05Z")
        XCTAssertEqual(rfc3339(Date(timeIntervalSince1970: 1_709_164_800)), "2024-02-29T00:00:00Z")
    }

    func testSubMillisecondsAreTruncated() {
        XCTAssertEqual(rfc3339Milliseconds(Date(timeIntervalSince1970: 0.0009)), "1970-01-01T00:00:00.000Z")
        XCTAssertEqual(rfc3339Milliseconds(Date(timeIntervalSince1970: -0.0001)), "1969-12-31T23:59:59.999Z")
    }

    func testDatesBeyondTheYearsWrittenAreClamped() {
        XCTAssertEqual(rfc3339(.distantFuture), "4001-01-01T00:00:00Z")
        XCTAssertEqual(rfc3339(Date(timeIntervalSince1970: 1e15)), "9999-12-31T23:59:59Z")
        XCTAssertEqual(rfc3339(Date(timeIntervalSince1970: -1e15)), "0001-01-01T00:00:00Z")
        XCTAssertEqual(rfc3339Milliseconds(Date(timeIntervalSince1970: .infinity)), "9999-12-31T23:59:59.999Z")
        XCTAssertEqual(rfc3339(Date(timeIntervalSince1970: .nan)), "1970-01-01T00:00:00Z")
    }
}
