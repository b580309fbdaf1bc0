import Foundation
import PinproxyCore
import PinproxyInterop
@testable import PinproxyPolicy
import XCTest

/// How a staple OpenSSL read is judged at the evaluation time: usable only within its validity
/// period, give or take five minutes of clock skew.
final class StapleCheckTests: XCTestCase {
    private let thisUpdate = Date(timeIntervalSince1970: 1_800_000_000)
    private var nextUpdate: Date { thisUpdate + 86_400 }

    private func judge(_ status: StapleReading.Status, at time: Date, thisUpdate: Date??, nextUpdate: Date?? = .none) -> StapleStatus {
        OCSPStaple.judge(.answer(status: status, thisUpdate: thisUpdate ?? self.thisUpdate, nextUpdate: nextUpdate ?? self.nextUpdate), at: time)
    }

    func testTheValidityPeriodHoldsGiveOrTakeTheSkew() {
        XCTAssertEqual(judge(.good, at: thisUpdate - 300, thisUpdate: .none), .good)
        XCTAssertEqual(judge(.good, at: thisUpdate - 301, thisUpdate: .none), .unusable("the staple is not yet valid"))
        XCTAssertEqual(judge(.good, at: nextUpdate + 300, thisUpdate: .none), .good)
        XCTAssertEqual(judge(.good, at: nextUpdate + 301, thisUpdate: .none),
                       .unusable("the staple is out of date (nextUpdate \(nextUpdate))"))
    }

    func testMissingTimesMakeTheStapleUnusable() {
        XCTAssertEqual(judge(.good, at: thisUpdate, thisUpdate: .some(nil)), .unusable("the staple is not yet valid"))
        XCTAssertEqual(judge(.good, at: thisUpdate, thisUpdate: .none, nextUpdate: .some(nil)), .unusable("the staple has no nextUpdate"))
    }

    func testStatuses() {
        let since = thisUpdate - 3600
        XCTAssertEqual(judge(.revoked(since: since), at: thisUpdate, thisUpdate: .none), .revoked(since: since))
        XCTAssertEqual(judge(.unknown, at: thisUpdate, thisUpdate: .none), .unusable("the responder does not know the certificate"))
        XCTAssertEqual(OCSPStaple.judge(.unusable("the staple is not signed by the issuer"), at: thisUpdate),
                       .unusable("the staple is not signed by the issuer"))
    }
}
