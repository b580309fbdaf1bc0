@testable import PinproxyProxy
import XCTest

/// `RelayFlow`, one direction of the relay, as a pure value: every state × every event, the
/// next state and what the relay does. Events that do not apply to a state change nothing.
final class RelayFlowTests: XCTestCase {
    typealias State = RelayFlow.State
    typealias Event = RelayFlow.Event
    typealias Action = RelayFlow.Action

    static let pending: [UInt8] = [1, 2, 3, 4, 5]

    /// One of each state (both inputs where the state carries one).
    static let states: [State] = [
        .starting(buffered: [], .socket), .starting(buffered: [7, 8], .buffered),
        .reading(.socket), .reading(.buffered),
        .waitingToWrite(pending: pending, offset: 1, .socket), .waitingToWrite(pending: pending, offset: 0, .buffered),
        .readWaitsForWrite(.socket), .readWaitsForWrite(.buffered),
        .ended(.notAsked), .ended(.queued), .ended(.sent),
        .stopped, .closed,
    ]

    static let events: [Event] = [
        .start, .readable, .wrote(count: 2), .wrote(count: 4), .sinkFull(rest: [9]), .sinkWritable, .sourceWritable,
        .readWouldBlock, .readNeedsWrite, .sourceEnded, .sinkFailed, .renegotiationRequested,
        .shutdownWrite, .closeNotifySent, .close,
    ]

    /// The transitions that change something; every other pair leaves the state and does nothing.
    static func expected(_ state: State, _ event: Event) -> (State, Action)? {
        switch (state, event) {
        case (.starting([], .socket), .start): (.reading(.socket), .read(.socket))
        case (.starting([7, 8], .buffered), .start): (.reading(.buffered), .deliverBuffered([7, 8]))

        case (.reading(let input), .readable): (.reading(input), .read(input))
        case (.reading(let input), .sinkFull): (.waitingToWrite(pending: [9], offset: 0, input), .none)
        case (.reading(.buffered), .readWouldBlock): (.reading(.socket), .readFromSocket)
        case (.reading(.socket), .readWouldBlock): (.reading(.socket), .releaseReadBuffer)
        case (.reading(let input), .readNeedsWrite): (.readWaitsForWrite(input), .none)
        case (.reading, .sourceEnded): (.ended(.notAsked), .reportEnded)
        case (.reading, .sinkFailed): (.stopped, .reportSinkFailed)
        case (.reading, .renegotiationRequested): (.stopped, .reportRenegotiation)

        // 5 pending bytes: from offset 1, 2 written leave 2; 4 written leave none.
        case (.waitingToWrite(_, 1, .socket), .wrote(2)): (.waitingToWrite(pending: pending, offset: 3, .socket), .writePending)
        case (.waitingToWrite(_, 1, .socket), .wrote(4)): (.reading(.socket), .read(.socket))
        case (.waitingToWrite(_, 0, .buffered), .wrote(2)): (.waitingToWrite(pending: pending, offset: 2, .buffered), .writePending)
        case (.waitingToWrite(_, 0, .buffered), .wrote(4)): (.waitingToWrite(pending: pending, offset: 4, .buffered), .writePending)
        case (.waitingToWrite, .sinkWritable): (state, .writePending)
        case (.waitingToWrite, .sinkFailed): (.stopped, .reportSinkFailed)

        case (.readWaitsForWrite(let input), .sourceWritable): (.reading(input), .read(input))

        case (.ended(.notAsked), .shutdownWrite): (.ended(.queued), .sendCloseNotify)
        case (.ended(.queued), .sinkWritable): (.ended(.queued), .sendCloseNotify)
        case (.ended(.queued), .closeNotifySent): (.ended(.sent), .none)

        case (.closed, _): nil
        case (.ended(.queued), .close), (.ended(.sent), .close): (.closed, .none)
        case (_, .close): (.closed, .sendCloseNotify)
        default: nil
        }
    }

    func testEveryStateAndEvent() {
        var changing = 0
        for state in Self.states {
            for event in Self.events {
                var flow = Self.flow(in: state)
                XCTAssertEqual(flow.state, state)
                let action = flow.handle(event)
                let (next, expectedAction) = Self.expected(state, event) ?? (state, .none)
                XCTAssertEqual(flow.state, next, "\(state) × \(event)")
                XCTAssertEqual(action, expectedAction, "\(state) × \(event)")
                if next != state || expectedAction != .none { changing += 1 }
            }
        }
        // The table above is used (a typo in a pattern would silently make a pair "nothing").
        XCTAssertEqual(changing, 41)
    }

    /// Which libevent events each state asks the relay to register.
    func testRegistrationsFollowTheState() {
        for state in Self.states {
            let flow = Self.flow(in: state)
            let reads: Bool, sinkWritable: Bool, sourceWritable: Bool
            switch state {
            case .reading: (reads, sinkWritable, sourceWritable) = (true, false, false)
            case .waitingToWrite, .ended(.queued): (reads, sinkWritable, sourceWritable) = (false, true, false)
            case .readWaitsForWrite: (reads, sinkWritable, sourceWritable) = (false, false, true)
            case .starting, .ended, .stopped, .closed: (reads, sinkWritable, sourceWritable) = (false, false, false)
            }
            XCTAssertEqual(flow.readsSource, reads, "\(state)")
            XCTAssertEqual(flow.needsSinkWritable, sinkWritable, "\(state)")
            XCTAssertEqual(flow.needsSourceWritable, sourceWritable, "\(state)")
            let pending = if case .waitingToWrite(let bytes, let offset, _) = state { bytes.count - offset } else { 0 }
            XCTAssertEqual(flow.pendingCount, pending, "\(state)")
        }
    }

    /// A tunnel's life: buffered input used up, a full sink, a KeyUpdate answer, the end, the
    /// close_notify queued then sent, the close.
    func testATunnelsLife() {
        var flow = RelayFlow(buffered: [0x47], input: .buffered)
        XCTAssertEqual(flow.handle(.start), .deliverBuffered([0x47]))
        XCTAssertEqual(flow.handle(.readWouldBlock), .readFromSocket)
        XCTAssertEqual(flow.handle(.readable), .read(.socket))
        XCTAssertEqual(flow.handle(.sinkFull(rest: [1, 2, 3])), .none)
        XCTAssertEqual(flow.handle(.readable), .none)  // not read while bytes wait
        XCTAssertEqual(flow.handle(.sinkWritable), .writePending)
        XCTAssertEqual(flow.handle(.wrote(count: 1)), .writePending)
        XCTAssertEqual(flow.pendingCount, 2)
        XCTAssertEqual(flow.handle(.wrote(count: 2)), .read(.socket))
        XCTAssertEqual(flow.handle(.readNeedsWrite), .none)
        XCTAssertEqual(flow.handle(.readable), .none)
        XCTAssertEqual(flow.handle(.sourceWritable), .read(.socket))
        XCTAssertEqual(flow.handle(.shutdownWrite), .none)  // not before the direction has ended
        XCTAssertEqual(flow.handle(.sourceEnded), .reportEnded)
        XCTAssertEqual(flow.handle(.shutdownWrite), .sendCloseNotify)
        XCTAssertEqual(flow.handle(.shutdownWrite), .none)  // asked once
        XCTAssertEqual(flow.handle(.closeNotifySent), .none)
        XCTAssertEqual(flow.state, .ended(.sent))
        XCTAssertEqual(flow.handle(.close), .none)  // it has had its close_notify
        XCTAssertEqual(flow.handle(.close), .none)
        XCTAssertEqual(flow.state, .closed)
    }

    /// A flow brought into `state` through its own transitions.
    static func flow(in state: State) -> RelayFlow {
        func started(_ input: RelayFlow.Input) -> RelayFlow {
            var flow = RelayFlow(buffered: [], input: input)
            _ = flow.handle(.start)
            return flow
        }
        var flow: RelayFlow
        switch state {
        case .starting(let buffered, let input):
            return RelayFlow(buffered: buffered, input: input)
        case .reading(let input):
            return started(input)
        case .waitingToWrite(let pending, let offset, let input):
            flow = started(input)
            _ = flow.handle(.sinkFull(rest: pending))
            if offset > 0 { _ = flow.handle(.wrote(count: offset)) }
        case .readWaitsForWrite(let input):
            flow = started(input)
            _ = flow.handle(.readNeedsWrite)
        case .ended(let closeNotify):
            flow = started(.socket)
            _ = flow.handle(.sourceEnded)
            if closeNotify != .notAsked { _ = flow.handle(.shutdownWrite) }
            if closeNotify == .sent { _ = flow.handle(.closeNotifySent) }
        case .stopped:
            flow = started(.socket)
            _ = flow.handle(.sinkFailed)
        case .closed:
            flow = started(.socket)
            _ = flow.handle(.close)
        }
        return flow
    }
}
