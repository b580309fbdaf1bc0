import FoundationEssentials

/// `2026-01-31T12:00:00Z`: `date` in UTC, to the second (truncated).
public func rfc3339(_ date: Date) -> String {
    RFC3339.text(date, milliseconds: false)
}

/// `2026-01-31T12:00:00.123Z`: `date` in UTC, to the millisecond (truncated).
public func rfc3339Milliseconds(_ date: Date) -> String {
    RFC3339.text(date, milliseconds: true)
}

/// RFC 3339 text worked out from the count of milliseconds since 1970, with no formatter
/// object, locale or time zone: a log line writes several (every SCT's time), and a Foundation
/// formatter costs more to make than the whole line. Years 1 to 9999; a date outside is
/// written as the nearest end.
enum RFC3339 {
    static let earliest: Int64 = -62_135_596_800_000  // 0001-01-01T00:00:00.000Z
    static let latest: Int64 = 253_402_300_799_999  // 9999-12-31T23:59:59.999Z

    static func text(_ date: Date, milliseconds withMilliseconds: Bool) -> String {
        // A Date counts from 2001, so an exact millisecond since 1970 can come back a few tenths
        // of a microsecond short (5 ms as 4.9999997): a microsecond's allowance keeps it whole.
        let exact = (date.timeIntervalSince1970 * 1000 + 0.001).rounded(.down)
        let total = exact.isNaN ? 0 : Int64(min(max(exact, Double(earliest)), Double(latest)))
        let (seconds, millisecond) = floorDivision(total, 1000)
        let (days, secondOfDay) = floorDivision(seconds, 86_400)
        let (year, month, day) = civil(daysSince1970: days)
        var text: [UInt8] = []
        text.reserveCapacity(24)
        func append(_ value: Int64, digits: Int, then separator: Unicode.Scalar?) {
            var divisor: Int64 = 1
            for _ in 1..<digits { divisor *= 10 }
            while divisor > 0 {
                text.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
                divisor /= 10
            }
            if let separator { text.append(UInt8(ascii: separator)) }
        }
        append(year, digits: 4, then: "-")
        append(month, digits: 2, then: "-")
        append(day, digits: 2, then: "T")
        append(secondOfDay / 3600, digits: 2, then: ":")
        append(secondOfDay / 60 % 60, digits: 2, then: ":")
        if withMilliseconds {
            append(secondOfDay % 60, digits: 2, then: ".")
            append(millisecond, digits: 3, then: "Z")
        } else {
            append(secondOfDay % 60, digits: 2, then: "Z")
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// Quotient rounded down, and the remainder (never negative for a positive divisor).
    static func floorDivision(_ value: Int64, _ divisor: Int64) -> (Int64, Int64) {
        let quotient = value >= 0 ? value / divisor : (value - divisor + 1) / divisor
        return (quotient, value - quotient * divisor)
    }

    /// The proleptic Gregorian year, month and day of a count of days since 1970-01-01
    /// (H. Hinnant's `civil_from_days`, http://howardhinnant.github.io/date_algorithms.html).
    static func civil(daysSince1970 days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let shifted = days + 719_468  // days since 0000-03-01
        let era = floorDivision(shifted, 146_097).0
        let dayOfEra = shifted - era * 146_097  // 0...146096
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)  // from March 1
        let monthIndex = (5 * dayOfYear + 2) / 153  // 0 = March
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
