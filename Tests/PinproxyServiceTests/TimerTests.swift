import XCTest
import PinproxyInterop

/// `PinproxyInterop.Timer` releases what it holds: a cancelled timer drops its action (and so
/// whatever the action captured, which breaks cycles through the timer), and a timer keeps its
/// loop alive, so no event outlives the base it was made on.
final class TimerTests: XCTestCase {
    private final class Captured {}

    func testCancelReleasesTheAction() throws {
        let loop = try EventLoop()
        weak var observed: Captured?
        let timer: PinproxyInterop.Timer
        do {
            let captured = Captured()
            observed = captured
            timer = PinproxyInterop.Timer(loop: loop, after: 3600) { _ = captured }
        }
        XCTAssertNotNil(observed)
        XCTAssertTrue(timer.isPending)
        timer.cancel()
        XCTAssertFalse(timer.isPending)
        XCTAssertNil(observed, "a cancelled timer still holds what its action captured")
    }

    func testATimerKeepsItsLoop() throws {
        weak var observedLoop: EventLoop?
        var timer: PinproxyInterop.Timer?
        do {
            let loop = try EventLoop()
            observedLoop = loop
            timer = PinproxyInterop.Timer(loop: loop, after: 3600) {}
        }
        XCTAssertNotNil(observedLoop, "the loop was freed under a timer still on it")
        XCTAssertTrue(timer?.isPending == true)
        timer = nil
        XCTAssertNil(observedLoop)
    }
}
