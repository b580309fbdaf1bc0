/// One direction of a `TLSRelay` (up: client to upstream) as a plain value: its state, and the
/// one transition function every event of the direction goes through. It does no I/O: the relay
/// reads and writes, tells it what happened, and does what it answers. The libevent events the
/// relay keeps registered follow from the state (`readsSource`, `needsSinkWritable`,
/// `needsSourceWritable`).
struct RelayFlow: Equatable {
    /// Where the source's SSL reads: encrypted bytes buffered before the relay, then its socket.
    enum Input: Equatable {
        case buffered, socket
    }

    /// The sink's close_notify, once the source has ended.
    enum CloseNotify: Equatable {
        /// The owner has not asked for it.
        case notAsked
        /// Asked for; it waits for the sink's socket.
        case queued
        /// Sent (or the sink is gone).
        case sent
    }

    enum State: Equatable {
        /// Before `start`: what the source's SSL had decrypted before the relay (maybe nothing).
        case starting(buffered: [UInt8], Input)
        /// The source is read; nothing waits for the sink.
        case reading(Input)
        /// The sink could not take all of a read: `pending[offset...]` waits for its socket (at
        /// most one read's worth), and the source is not read.
        case waitingToWrite(pending: [UInt8], offset: Int, Input)
        /// The source's SSL must write before it reads on (a TLS 1.3 KeyUpdate answer) and the
        /// source's socket is full.
        case readWaitsForWrite(Input)
        /// The source stopped sending; everything it sent has reached the sink's socket.
        case ended(CloseNotify)
        /// Nothing more moves: the sink failed, or the upstream asked to renegotiate. The
        /// owner closes the relay.
        case stopped
        /// The relay is closed.
        case closed
    }

    /// What happened to the direction.
    enum Event: Equatable {
        /// The relay starts.
        case start
        /// The source's socket has bytes (or a pass goes on).
        case readable
        /// The sink took `count` of the pending bytes.
        case wrote(count: Int)
        /// The sink could not take all of a read: `rest` is what it did not take.
        case sinkFull(rest: [UInt8])
        /// The sink's socket can be written to.
        case sinkWritable
        /// The source's socket can be written to.
        case sourceWritable
        /// The source's SSL needs more bytes than its input has.
        case readWouldBlock
        /// The source's SSL must write before it reads on, and its socket is full.
        case readNeedsWrite
        /// close_notify, the end of the stream, or a read error.
        case sourceEnded
        /// The sink cannot be written to.
        case sinkFailed
        /// The upstream (the source of down) asked for a TLS renegotiation.
        case renegotiationRequested
        /// The owner asks for the sink's close_notify.
        case shutdownWrite
        /// The queued close_notify has gone out.
        case closeNotifySent
        /// The relay closes.
        case close
    }

    /// What the relay does next.
    enum Action: Equatable {
        case none
        /// Relay what the buffered plaintext was (report, then write it to the sink).
        case deliverBuffered([UInt8])
        /// A pass: read the source and write to the sink.
        case read(Input)
        /// Write the pending bytes to the sink.
        case writePending
        /// The buffered input is used up: the SSL reads its socket from now on, and reads on.
        case readFromSocket
        /// The source is idle: its SSL's read buffer goes back to the allocator.
        case releaseReadBuffer
        case reportEnded
        case reportSinkFailed
        case reportRenegotiation
        /// Send (or, when closing, try once to send) the sink's close_notify.
        case sendCloseNotify
    }

    private(set) var state: State

    /// A direction whose source's SSL had decrypted `buffered` before the relay.
    init(buffered: [UInt8], input: Input) {
        state = .starting(buffered: buffered, input)
    }

    /// The one transition function: the next state, and what the relay does.
    mutating func handle(_ event: Event) -> Action {
        switch (state, event) {
        case (.starting(let buffered, let input), .start):
            state = .reading(input)
            return buffered.isEmpty ? .read(input) : .deliverBuffered(buffered)

        case (.reading(let input), .readable):
            return .read(input)
        case (.reading(let input), .sinkFull(let rest)):
            state = .waitingToWrite(pending: rest, offset: 0, input)
            return .none
        case (.reading(.buffered), .readWouldBlock):
            state = .reading(.socket)
            return .readFromSocket
        case (.reading(.socket), .readWouldBlock):
            return .releaseReadBuffer
        case (.reading(let input), .readNeedsWrite):
            state = .readWaitsForWrite(input)
            return .none
        case (.reading, .sourceEnded):
            state = .ended(.notAsked)
            return .reportEnded
        case (.reading, .sinkFailed), (.waitingToWrite, .sinkFailed):
            state = .stopped
            return .reportSinkFailed
        case (.reading, .renegotiationRequested):
            state = .stopped
            return .reportRenegotiation

        case (.waitingToWrite(let pending, let offset, let input), .wrote(let count)):
            guard offset + count < pending.count else {
                state = .reading(input)  // the buffer is released
                return .read(input)
            }
            state = .waitingToWrite(pending: pending, offset: offset + count, input)
            return .writePending
        case (.waitingToWrite, .sinkWritable):
            return .writePending

        case (.readWaitsForWrite(let input), .sourceWritable):
            state = .reading(input)
            return .read(input)

        case (.ended(.notAsked), .shutdownWrite):
            state = .ended(.queued)
            return .sendCloseNotify
        case (.ended(.queued), .sinkWritable):
            return .sendCloseNotify
        case (.ended(.queued), .closeNotifySent):
            state = .ended(.sent)
            return .none

        case (.closed, _):
            return .none
        case (.ended(.queued), .close), (.ended(.sent), .close):
            state = .closed
            return .none
        case (_, .close):
            state = .closed
            return .sendCloseNotify

        // Events that do not apply to the state: a spurious wake-up, or a request that came
        // too early or twice. Nothing changes.
        case (.starting, _), (.reading, _), (.waitingToWrite, _), (.readWaitsForWrite, _), (.ended, _), (.stopped, _):
            return .none
        }
    }

    /// Whether the source's read event is registered.
    var readsSource: Bool {
        switch state {
        case .reading: true
        case .starting, .waitingToWrite, .readWaitsForWrite, .ended, .stopped, .closed: false
        }
    }

    /// Whether something waits for the sink's socket to be writable.
    var needsSinkWritable: Bool {
        switch state {
        case .waitingToWrite, .ended(.queued): true
        case .starting, .reading, .readWaitsForWrite, .ended(.notAsked), .ended(.sent), .stopped, .closed: false
        }
    }

    /// Whether the source's SSL waits for its own socket to be writable.
    var needsSourceWritable: Bool {
        switch state {
        case .readWaitsForWrite: true
        case .starting, .reading, .waitingToWrite, .ended, .stopped, .closed: false
        }
    }

    /// How many bytes wait for the sink.
    var pendingCount: Int {
        switch state {
        case .waitingToWrite(let pending, let offset, _): pending.count - offset
        case .starting, .reading, .readWaitsForWrite, .ended, .stopped, .closed: 0
        }
    }
}
