import PinproxyInterop
import PinproxyCore

/// The in-TLS refusal for a client that chose h2 (`InTLSRefusal`): the refusal's status and
/// text page on the client's first stream, or, for a gRPC request (`content-type:
/// application/grpc…`), a Trailers-Only response whose `grpc-status` and `grpc-message` say why;
/// then GOAWAY. It reads the client's connection preface and at most one request's header block,
/// within `maximumRequestBytes` in all. Bytes in, bytes out: the caller moves them.
final class HTTP2Refusal {
    /// Where the exchange stands after some input.
    enum Progress: Equatable {
        /// The answer is not complete yet (no request, or flow control holds its body back).
        case reading
        /// The answer and the GOAWAY after it are in the output: nothing more to send.
        case answered
        /// The client broke the protocol, sent too much, or ended the connection first:
        /// whatever the output holds (a GOAWAY) is the last of it.
        case failed(String)
    }

    /// What the client may send before its first request is complete (preface, SETTINGS,
    /// header block, CONTINUATIONs), and the header list kept of that request.
    static let maximumRequestBytes = 64 * 1024
    static let maximumFieldBytes = 16 * 1024

    private let session: HTTP2ServerSession
    private let page: RefusalResponse.Page
    private var received = 0
    private var answeredStream: Int32?
    private(set) var progress = Progress.reading

    init(page: RefusalResponse.Page) throws {
        session = try HTTP2ServerSession(maximumFieldBytes: Self.maximumFieldBytes)
        self.page = page
    }

    /// The server's side of the connection preface (its SETTINGS), sent before anything is read.
    func start() -> [UInt8] {
        output()
    }

    /// Takes what the client sent, and returns what to send it. Past `maximumRequestBytes`,
    /// input is no longer looked at.
    func receive(_ bytes: [UInt8]) -> [UInt8] {
        guard progress == .reading else { return [] }
        let room = max(0, Self.maximumRequestBytes - received)
        received += bytes.count
        do {
            try session.receive(Array(bytes.prefix(room)))
        } catch {
            progress = .failed("the client's HTTP/2 is malformed (\(error))")
            return output()
        }
        if answeredStream == nil, let request = session.firstRequest {
            answer(request)
        } else if answeredStream == nil, received > Self.maximumRequestBytes {
            progress = .failed("the client sent more than \(Self.maximumRequestBytes / 1024) KiB without completing a request")
            try? session.goAway(lastStreamID: 0)
        }
        return output()
    }

    private func answer(_ request: HTTP2ServerSession.Request) {
        answeredStream = request.streamID
        let isGRPC = request.value(of: "content-type").map(Self.isGRPC) ?? false
        let isHead = request.value(of: ":method") == "HEAD"
        do {
            if isGRPC {
                try session.respond(to: request.streamID, fields: RefusalResponse.grpcFields(page), body: nil)
            } else {
                let body = Array(RefusalResponse.inTLSBody(page).utf8)
                try session.respond(to: request.streamID, fields: RefusalResponse.http2Fields(page, contentLength: body.count),
                                    body: isHead ? nil : body)
            }
        } catch {
            progress = .failed("cannot answer the client's HTTP/2 request: \(error)")
        }
    }

    /// Whether a request's content-type is gRPC's (`application/grpc`, `application/grpc+proto`, …).
    static func isGRPC(_ contentType: String) -> Bool {
        let type = contentType.lowercased()
        guard type.hasPrefix("application/grpc") else { return false }
        let rest = type.dropFirst("application/grpc".count)
        return rest.isEmpty || rest.first == "+" || rest.first == ";"
    }

    /// What nghttp2 has to send; once the answer's last frame is among it, the GOAWAY follows.
    private func output() -> [UInt8] {
        do {
            var bytes = try session.takeOutput()
            if progress == .reading, session.answerSent, let stream = answeredStream {
                try session.goAway(lastStreamID: stream)
                bytes += try session.takeOutput()
                progress = .answered
            } else if progress == .reading, session.isFinished {
                progress = .failed("the client ended the HTTP/2 connection before its request was answered")
            }
            return bytes
        } catch {
            if progress == .reading { progress = .failed("\(error)") }
            return []
        }
    }
}
