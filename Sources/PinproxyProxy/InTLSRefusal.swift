import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import PinproxyService
import Logging

/// `refusal = "in-tls"`: a refusal delivered inside the client's TLS, for clients that print
/// only a CONNECT status (curl, git). It answers 200, completes the client's TLS with a leaf
/// minted for the CONNECT host, selecting h2 when the client offers it (else http/1.1), and
/// answers in that protocol: over HTTP/1.1 it reads the client's request head and sends the
/// refusal page (an HTTP 403/502/504 with `Connection: close`); over h2 `HTTP2Refusal` answers
/// the first stream (a gRPC request in gRPC's terms) and sends GOAWAY. Then it says
/// close_notify, and lets the client close first (or `timeout` pass) so that the answer is never
/// lost to a reset. The upstream plays no part: the caller closes it before starting this, and
/// nothing here can reach it.
///
/// It is a state machine: each `State` holds its timer and what its step reads with, and every
/// event is handled in every state. The responder keeps itself alive through the callbacks of
/// its TLS connection (`tls`); it ends by calling `finished` once, after which the caller
/// closes that connection, or by `stop`.
final class InTLSRefusal<IO: ConnectionIO> {
    /// How the exchange ended.
    enum Outcome: Equatable {
        /// The page was sent (and the client closed, or stopped reading in time).
        case answered
        /// The client's TLS handshake failed (e.g. it does not trust the pinproxy CA).
        case handshakeFailed(String)
        /// The client's HTTP/2 could not be answered (malformed, too large, or ended first).
        case http2Failed(String)
        /// The client closed before its request was complete.
        case clientClosed
        /// No handshake, or no complete request, within the timeout.
        case timedOut
        /// An event that cannot happen in the state it came in (named): the exchange is cut off.
        case unexpected(String)
    }

    /// Where the exchange is, with what that step needs.
    enum State {
        /// The client's TLS handshake, within `timeout`.
        case handshaking(timer: IO.Timer)
        /// Over HTTP/1.1: reading the request head, within `timeout` from the handshake's end.
        case readingHead(RequestHead, timer: IO.Timer)
        /// Over h2: the client's frames until its first request is answered, within the same
        /// `timeout`.
        case readingHTTP2(HTTP2Refusal, timer: IO.Timer)
        /// The answer is being written, still within the reading's `timeout`.
        case sending(timer: IO.Timer)
        /// The answer is out and close_notify sent: what the client still sends is discarded
        /// until it closes, or `timeout` passes (the answer counts as delivered then).
        case draining(timer: IO.Timer)
        /// `finished` was called; the callbacks are removed.
        case done

        var name: String {
            switch self {
            case .handshaking: "handshaking"
            case .readingHead: "reading-head"
            case .readingHTTP2: "reading-http2"
            case .sending: "sending"
            case .draining: "draining"
            case .done: "done"
            }
        }
    }

    /// The HTTP/1.1 request head read so far.
    struct RequestHead {
        var lines = 0
        /// A HEAD request gets the page's head only.
        var isHead = false
    }

    /// Limits on the request head read before the page is sent (the CONNECT parser's).
    static var maximumLineBytes: Int { 8 * 1024 }
    static var maximumHeadLines: Int { 100 }

    private let io: IO
    /// The client's TLS connection, which replaces the plain one for the caller.
    let tls: IO.Endpoint
    private let page: RefusalResponse.Page
    private let timeout: TimeInterval
    private let finished: (Outcome) -> Void
    private(set) var state: State = .done

    private init(io: IO, tls: IO.Endpoint, page: RefusalResponse.Page, timeout: TimeInterval, finished: @escaping (Outcome) -> Void) {
        self.io = io
        self.tls = tls
        self.page = page
        self.timeout = timeout
        self.finished = finished
    }

    /// Answers 200 on `client` (the plain connection, its CONNECT read; bytes after it are the
    /// start of the client's handshake) unless `answerConnect` is false (a transparent client,
    /// which sent no CONNECT), starts the TLS handshake with a leaf minted for `host`, and
    /// returns the responder, whose `tls` replaces `client` for the caller (closing it sends
    /// what is buffered, then closes the socket).
    static func start(client: IO.Endpoint, answerConnect: Bool, io: IO, host: TargetHost, bufferLimit: Int, timeout: TimeInterval,
                      page: RefusalResponse.Page, finished: @escaping (Outcome) -> Void) throws -> InTLSRefusal {
        if answerConnect { client.write(Array("HTTP/1.1 200 Connection established\r\n\r\n".utf8)) }
        let tls = try io.acceptTLS(on: client, for: host, serverName: host.serverName, applicationProtocols: [.h2, .http11],
                                   bufferLimit: bufferLimit)
        let responder = InTLSRefusal(io: io, tls: tls, page: page, timeout: timeout, finished: finished)
        responder.awaitHandshake()
        return responder
    }

    /// The caller closes the connection first (the daemon stops): the timer and the callbacks
    /// go, and `finished` is not called.
    func stop() {
        state = .done
        tls.onRead = nil
        tls.onWrite = nil
        tls.onEvent = nil
    }

    private func awaitHandshake() {
        state = .handshaking(timer: deadline())
        tls.onEvent = { [self] events in event(events) }
        tls.onRead = { [self] in readable() }
        tls.onWrite = { [self] in writable() }
    }

    /// A timer that ends the exchange after `timeout`: timed out, or, once the answer is out,
    /// answered (`deadlinePassed`).
    private func deadline() -> IO.Timer {
        io.timer(after: timeout, repeats: false) { [weak self] in self?.deadlinePassed() }
    }

    // MARK: Events

    private func event(_ events: EndpointEvents) {
        switch state {
        case .handshaking:
            guard events.contains(.connected) else { return finish(.handshakeFailed(tls.takeTLSErrors().description)) }
            handshakeDone()
        case .readingHead, .readingHTTP2:
            finish(.clientClosed)
        case .sending, .draining:
            finish(.answered)
        case .done:
            impossible("an event (\(events.rawValue))")
        }
    }

    private func readable() {
        switch state {
        case .handshaking:
            // Data that came with the end of the handshake can be reported before the handshake
            // itself: it stays buffered, and is read once the handshake is done.
            break
        case .readingHead:
            readRequest()
        case .readingHTTP2:
            readHTTP2()
        case .sending, .draining:
            // The answer is decided: what the client still sends is not read.
            tls.discardInput()
        case .done:
            impossible("a read")
        }
    }

    private func writable() {
        switch state {
        case .sending:
            if tls.outputLength == 0 { drain() }
        case .handshaking, .readingHead, .readingHTTP2, .draining:
            break  // a handshake message, SETTINGS or the close_notify went out: nothing waits for it
        case .done:
            impossible("a write completion")
        }
    }

    private func deadlinePassed() {
        switch state {
        case .handshaking, .readingHead, .readingHTTP2, .sending:
            finish(.timedOut)
        case .draining:
            finish(.answered)
        case .done:
            impossible("the timer")
        }
    }

    /// After `finish` every callback and the timer are gone: an event then is a bug in the
    /// buffer event or timer, not in the client, and the connection is already closed.
    private func impossible(_ event: String) {
        assertionFailure("\(event) after the in-TLS refusal ended")
    }

    // MARK: Steps

    private func handshakeDone() {
        let timer = deadline()
        tls.setReading(true)
        guard tls.selectedProtocol == .h2 else {
            state = .readingHead(RequestHead(), timer: timer)
            return readRequest()
        }
        // Over h2: the server's SETTINGS at once, then the client's frames.
        let http2: HTTP2Refusal
        do {
            http2 = try HTTP2Refusal(page: page)
        } catch {
            return finish(.http2Failed("\(error)"))
        }
        state = .readingHTTP2(http2, timer: timer)
        tls.write(http2.start())
        readHTTP2()
    }

    private func readHTTP2() {
        while case .readingHTTP2(let http2, _) = state, case let bytes = tls.read(maxLength: 16 * 1024), !bytes.isEmpty {
            let output = http2.receive(bytes)
            switch http2.progress {
            case .reading:
                tls.write(output)
            case .answered:
                return send(output)
            case .failed(let why):
                tls.write(output)
                return finish(.http2Failed(why))
            }
        }
    }

    /// Over HTTP/1.1: reads the request head line by line; sends the page at its end (or at a
    /// line that is too long, not text, or one too many).
    private func readRequest() {
        while case .readingHead(var head, let timer) = state {
            switch tls.readLine(maxLength: Self.maximumLineBytes) {
            case .incomplete:
                return
            case .tooLong, .notText:
                return sendPage(head)
            case .line(let text):
                if head.lines == 0 && text.isEmpty { continue }  // stray CRLF before the request line
                if head.lines == 0 { head.isHead = text.hasPrefix("HEAD ") }
                head.lines += 1
                if text.isEmpty || head.lines > Self.maximumHeadLines { return sendPage(head) }
                state = .readingHead(head, timer: timer)
            }
        }
    }

    private func sendPage(_ head: RequestHead) {
        send(RefusalResponse.inTLSResponse(page, includeBody: !head.isHead))
    }

    /// Writes the last of the answer, within the reading's timer; once it has all gone out, `drain`.
    private func send(_ answer: [UInt8]) {
        switch state {
        case .readingHead(_, let timer), .readingHTTP2(_, let timer):
            state = .sending(timer: timer)
        case .handshaking, .sending, .draining, .done:
            return finish(.unexpected("an answer to send"))
        }
        tls.discardInput()
        tls.setWriteLowWatermark(0)
        tls.write(answer)
        if tls.outputLength == 0 { drain() }
    }

    /// The page is out: close_notify, then discard whatever the client still sends until it
    /// closes, so that closing never resets the connection under an unread page.
    private func drain() {
        state = .draining(timer: deadline())
        tls.shutdownWrite()
    }

    private func finish(_ outcome: Outcome) {
        stop()
        finished(outcome)
    }
}

extension ClientConnection {
    /// The hook `sendRefusal` calls under `refusal = "in-tls"` once the decision is logged and
    /// the upstream closed: the refusal page inside the client's TLS (state `refusingInTLS`),
    /// then `close()`.
    func refuseInTLS(_ subject: Subject, reason: RefusalReason, detail: String, proxyStatus: String, verdict: Verdict?) {
        let entry = verdict?.entry ?? subject.entry
        let policy = entry?.policy
        let page = RefusalResponse.Page(
            status: reason.traits.httpStatus, reason: reason, detail: detail, proxyStatus: proxyStatus,
            host: subject.host.description, port: subject.port,
            entry: entry?.name, configPath: config.path,
            presented: (verdict?.presented ?? []).map {
                ($0.subject, Pin(digest: $0.publicKeySHA256).description, Pin(digest: $0.certificateSHA256).description)
            },
            pinKind: policy.flatMap { $0.pinKind == .none ? nil : $0.pinKind.rawValue },
            pins: policy?.pins.map(\.description) ?? [], captured: listener == .transparent)
        enter(.refusingInTLS(subject, reason, nil))
        do {
            let responder = try InTLSRefusal.start(
                client: clientSide, answerConnect: listener == .connect, io: io, host: subject.host, bufferLimit: config.proxy.relayBufferBytes,
                timeout: config.proxy.handshakeTimeout, page: page
            ) { [weak self] outcome in self?.inTLSRefusalFinished(outcome) }
            clientSide = responder.tls
            update(.refusingInTLS(subject, reason, responder))
        } catch {
            logEvent(.error, "intercept-failed", detail: "cannot mint or install a certificate for \(subject.host): \(error)")
            close()
        }
    }

    private func inTLSRefusalFinished(_ outcome: InTLSRefusal<IO>.Outcome) {
        guard case .refusingInTLS(_, let reason, _) = state else { return unexpected("the end of an in-TLS refusal") }
        switch outcome {
        case .answered:
            logEvent(.info, "refusal-in-tls", detail: "\(reason.rawValue): the refusal page was sent inside the client's TLS")
        case .handshakeFailed(let failure):
            logEvent(.warning, "client-handshake-failed", detail: "\(failure) (does the client trust the pinproxy CA? see `pinproxy ca`)")
        case .http2Failed(let why):
            logEvent(.info, "refusal-in-tls", detail: "\(reason.rawValue): \(why): closed")
        case .clientClosed:
            logEvent(.info, "refusal-in-tls", detail: "\(reason.rawValue): the client closed before its request was complete")
        case .timedOut:
            logEvent(.info, "refusal-in-tls", detail: "\(reason.rawValue): no TLS handshake or request within \(formatSeconds(config.proxy.handshakeTimeout))")
        case .unexpected(let event):
            return unexpected("\(event) in the in-TLS refusal")
        }
        close()
    }
}
