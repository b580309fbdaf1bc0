import Foundation
import PinproxyInterop
import PinproxyPolicy
import PinproxyService

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
/// The responder keeps itself alive through the callbacks of the TLS connection it returns;
/// it ends by calling `finished` once, after which the caller closes that connection.
final class InTLSRefusal {
    /// How the exchange ended.
    enum Outcome {
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
    }

    private enum State {
        case handshaking, readingRequest, sending, draining, done
    }

    /// Limits on the request head read before the page is sent (the CONNECT parser's).
    static let maximumLineBytes = 8 * 1024
    static let maximumHeadLines = 100

    private let loop: EventLoop
    private let tls: BufferEvent
    private let page: RefusalResponse.Page
    private let timeout: TimeInterval
    private let finished: (Outcome) -> Void
    private var state = State.handshaking
    private var timer: PinproxyInterop.Timer?
    private var headLines = 0
    private var isHead = false
    /// Over h2: the HTTP/2 side of the exchange.
    private var http2: HTTP2Refusal?

    private init(loop: EventLoop, tls: BufferEvent, page: RefusalResponse.Page, timeout: TimeInterval,
                 finished: @escaping (Outcome) -> Void) {
        self.loop = loop
        self.tls = tls
        self.page = page
        self.timeout = timeout
        self.finished = finished
    }

    /// Answers 200 on `client` (the plain connection, its CONNECT read; bytes after it are the
    /// start of the client's handshake) unless `answerConnect` is false (a transparent client,
    /// which sent no CONNECT), starts the TLS
    /// handshake with `leaf`, and returns the TLS connection, which replaces `client` for the
    /// caller (closing it sends what is buffered, then closes the socket).
    static func start(client: BufferEvent, answerConnect: Bool, loop: EventLoop, context: TLSServerContext, leaf: LocalCA.MintedLeaf,
                      serverName: String?, bufferLimit: Int, timeout: TimeInterval, page: RefusalResponse.Page,
                      finished: @escaping (Outcome) -> Void) throws -> BufferEvent {
        if answerConnect { client.write(Array("HTTP/1.1 200 Connection established\r\n\r\n".utf8)) }
        let tls = try client.acceptTLS(loop: loop, context: context, certificate: leaf.certificate, key: leaf.key,
                                       serverName: serverName, applicationProtocols: [.h2, .http11], bufferLimit: bufferLimit)
        let responder = InTLSRefusal(loop: loop, tls: tls, page: page, timeout: timeout, finished: finished)
        responder.awaitHandshake()
        return tls
    }

    private func awaitHandshake() {
        restartTimer()
        tls.onEvent = { [self] events in
            guard state == .handshaking else { return afterHandshake(events) }
            guard events.contains(.connected) else { return finish(.handshakeFailed(tls.takeTLSErrors().description)) }
            state = .readingRequest
            restartTimer()
            if tls.selectedProtocol == .h2 { return startHTTP2() }
            tls.onRead = { [self] in readRequest() }
            tls.setReading(true)
            readRequest()
        }
    }

    /// Over h2: the server's SETTINGS at once, then the client's frames until its first request
    /// is answered.
    private func startHTTP2() {
        do {
            let refusal = try HTTP2Refusal(page: page)
            http2 = refusal
            tls.write(refusal.start())
        } catch {
            return finish(.http2Failed("\(error)"))
        }
        tls.onRead = { [self] in readHTTP2() }
        tls.setReading(true)
        readHTTP2()
    }

    private func readHTTP2() {
        guard state == .readingRequest, let http2 else { return }
        while case let bytes = tls.read(maxLength: 16 * 1024), !bytes.isEmpty {
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
        while state == .readingRequest {
            switch tls.readLine(maxLength: Self.maximumLineBytes) {
            case .incomplete:
                return
            case .tooLong, .notText:
                return sendPage()
            case .line(let text):
                if headLines == 0 && text.isEmpty { continue }  // stray CRLF before the request line
                if headLines == 0 { isHead = text.hasPrefix("HEAD ") }
                headLines += 1
                if text.isEmpty || headLines > Self.maximumHeadLines { return sendPage() }
            }
        }
    }

    private func sendPage() {
        send(RefusalResponse.inTLSResponse(page, includeBody: !isHead))
    }

    /// Writes the last of the answer; once it has all gone out, `drain`.
    private func send(_ answer: [UInt8]) {
        state = .sending
        tls.discardInput()
        tls.setWriteLowWatermark(0)
        tls.onWrite = { [self] in
            if state == .sending && tls.outputLength == 0 { drain() }
        }
        tls.write(answer)
        if tls.outputLength == 0 { drain() }
    }

    /// The page is out: close_notify, then discard whatever the client still sends until it
    /// closes, so that closing never resets the connection under an unread page.
    private func drain() {
        state = .draining
        restartTimer(answered: true)
        tls.shutdownWrite()
        tls.onRead = { [self] in tls.discardInput() }
    }

    private func afterHandshake(_ events: BufferEvent.Events) {
        switch state {
        case .readingRequest: finish(.clientClosed)
        case .sending, .draining: finish(.answered)
        case .handshaking, .done: break
        }
    }

    private func restartTimer(answered: Bool = false) {
        timer?.cancel()
        timer = PinproxyInterop.Timer(loop: loop, after: timeout) { [weak self] in
            self?.finish(answered ? .answered : .timedOut)
        }
    }

    private func finish(_ outcome: Outcome) {
        guard state != .done else { return }
        state = .done
        timer?.cancel()
        timer = nil
        tls.onRead = nil
        tls.onWrite = nil
        tls.onEvent = nil
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
        enter(.refusingInTLS(subject, reason))
        do {
            let leaf = try worker.shared.leaf(for: subject.host)
            clientSide = try InTLSRefusal.start(
                client: clientSide, answerConnect: listener == .connect, loop: worker.loop, context: worker.shared.interceptTLS, leaf: leaf,
                serverName: subject.host.serverName, bufferLimit: config.proxy.relayBufferBytes,
                timeout: config.proxy.handshakeTimeout, page: page
            ) { [weak self] outcome in self?.inTLSRefusalFinished(outcome) }
        } catch {
            logEvent(.error, "intercept-failed", detail: "cannot mint or install a certificate for \(subject.host): \(error)")
            close()
        }
    }

    private func inTLSRefusalFinished(_ outcome: InTLSRefusal.Outcome) {
        guard case .refusingInTLS(_, let reason) = state else { return unexpected("the end of an in-TLS refusal") }
        // A capture loop is logged once per start (`logDecision`), not once per connection.
        if reason == .captureLoop { return close() }
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
        }
        close()
    }
}
