import Glibc
import CNghttp2
import PinproxyCore

/// The server side of one HTTP/2 connection, driven in memory by libnghttp2 (framing, flow
/// control, HPACK): `receive` takes what the client sent, `takeOutput` gives what to send back.
/// It keeps the header fields of the first request only (at most `maximumFieldBytes` of them,
/// counted as HPACK does: name, value and 32 bytes each) and answers one stream. It announces
/// one concurrent stream and that header-list size. Owns the nghttp2 session and frees it once.
public final class HTTP2ServerSession {
    public typealias Request = HTTP2Request
    public typealias Field = HTTP2Field

    /// What nghttp2 refused (a protocol error of the peer, or of a call).
    public struct Failure: Error, CustomStringConvertible {
        public let description: String

        init(_ operation: String, _ code: Int) {
            description = "\(operation): \(String(cString: nghttp2_strerror(Int32(clamping: code))))"
        }
    }

    private var session: OpaquePointer?
    /// The stream of the first request and its fields so far.
    private var firstStream: Int32?
    private var fields: HTTP2FieldCollector
    public private(set) var firstRequest: Request?
    /// The response body of the answered stream, and how much of it nghttp2 has taken.
    private var body: [UInt8] = []
    private var bodyOffset = 0
    private var answeredStream: Int32?
    /// Whether the answer's last frame (END_STREAM) has been handed out by `takeOutput`.
    public private(set) var answerSent = false

    /// A server session that has queued its SETTINGS (one concurrent stream, a header list of
    /// at most `maximumFieldBytes`).
    public init(maximumFieldBytes: Int) throws {
        fields = HTTP2FieldCollector(maximumBytes: maximumFieldBytes)
        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else {
            throw Failure("nghttp2_session_callbacks_new", Int(NGHTTP2_ERR_NOMEM.rawValue))
        }
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks) { _, frame, context in
            guard let frame, let session = HTTP2ServerSession.from(context) else { return NGHTTP2_ERR_CALLBACK_FAILURE.rawValue }
            session.beginHeaders(frame.pointee)
            return 0
        }
        nghttp2_session_callbacks_set_on_header_callback(callbacks) { _, frame, name, nameLength, value, valueLength, _, context in
            guard let frame, let name, let value, let session = HTTP2ServerSession.from(context) else {
                return NGHTTP2_ERR_CALLBACK_FAILURE.rawValue
            }
            session.header(frame.pointee, name: UnsafeBufferPointer(start: name, count: nameLength),
                           value: UnsafeBufferPointer(start: value, count: valueLength))
            return 0
        }
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks) { _, frame, context in
            guard let frame, let session = HTTP2ServerSession.from(context) else { return NGHTTP2_ERR_CALLBACK_FAILURE.rawValue }
            session.received(frame.pointee)
            return 0
        }
        nghttp2_session_callbacks_set_on_frame_send_callback(callbacks) { _, frame, context in
            guard let frame, let session = HTTP2ServerSession.from(context) else { return NGHTTP2_ERR_CALLBACK_FAILURE.rawValue }
            session.sent(frame.pointee)
            return 0
        }
        var created: OpaquePointer?
        let status = nghttp2_session_server_new(&created, callbacks, Unmanaged.passUnretained(self).toOpaque())
        guard status == 0, let created else { throw Failure("nghttp2_session_server_new", Int(status)) }
        session = created
        var settings = [
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: 1),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE.rawValue), value: UInt32(clamping: maximumFieldBytes)),
        ]
        let submitted = nghttp2_submit_settings(created, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count)
        guard submitted == 0 else { throw Failure("nghttp2_submit_settings", Int(submitted)) }
    }

    deinit {
        if let session { nghttp2_session_del(session) }
    }

    private static func from(_ context: UnsafeMutableRawPointer?) -> HTTP2ServerSession? {
        context.map { Unmanaged<HTTP2ServerSession>.fromOpaque($0).takeUnretainedValue() }
    }

    // MARK: Input

    /// Processes what the client sent. Throws on a protocol error nghttp2 cannot answer with a
    /// GOAWAY of its own (a bad connection preface, say): the connection is over.
    public func receive(_ bytes: [UInt8]) throws {
        guard let session, !bytes.isEmpty else { return }
        let consumed = bytes.withUnsafeBufferPointer { nghttp2_session_mem_recv(session, $0.baseAddress, $0.count) }
        if consumed < 0 { throw Failure("reading the client's HTTP/2 frames", consumed) }
    }

    /// Whether the session is over: nghttp2 wants neither to read nor to write (after a GOAWAY
    /// that ended it, or a connection error it answered).
    public var isFinished: Bool {
        guard let session else { return true }
        return nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0
    }

    private func beginHeaders(_ frame: nghttp2_frame) {
        guard frame.hd.type == UInt8(NGHTTP2_HEADERS.rawValue), frame.headers.cat == NGHTTP2_HCAT_REQUEST,
              firstStream == nil else { return }
        firstStream = frame.hd.stream_id
    }

    private func header(_ frame: nghttp2_frame, name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) {
        guard frame.hd.stream_id == firstStream, firstRequest == nil else { return }
        fields.append(name: name, value: value)
    }

    private func received(_ frame: nghttp2_frame) {
        guard frame.hd.type == UInt8(NGHTTP2_HEADERS.rawValue), frame.hd.stream_id == firstStream, firstRequest == nil else { return }
        firstRequest = Request(streamID: frame.hd.stream_id, fields: fields.fields, truncated: fields.truncated)
    }

    private func sent(_ frame: nghttp2_frame) {
        let type = frame.hd.type
        guard frame.hd.stream_id == answeredStream, frame.hd.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0,
              type == UInt8(NGHTTP2_HEADERS.rawValue) || type == UInt8(NGHTTP2_DATA.rawValue) else { return }
        answerSent = true
    }

    // MARK: Output

    /// Answers stream `streamID` with `fields` (`:status` first) and `body`; nil: a response
    /// made of its header block alone, which ends the stream (a gRPC Trailers-Only response, or
    /// the answer to HEAD). At most one stream is answered.
    public func respond(to streamID: Int32, fields: [Field], body: [UInt8]?) throws {
        guard let session, answeredStream == nil else { return }
        answeredStream = streamID
        self.body = body ?? []
        let status = Self.withNameValuePairs(fields) { pairs in
            guard body != nil else { return nghttp2_submit_response(session, streamID, pairs.baseAddress, pairs.count, nil) }
            var provider = nghttp2_data_provider()
            provider.read_callback = { _, _, buffer, length, flags, _, context in
                guard let buffer, let flags, let session = HTTP2ServerSession.from(context) else {
                    return Int(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue)
                }
                return session.readBody(into: buffer, length: length, flags: flags)
            }
            return nghttp2_submit_response(session, streamID, pairs.baseAddress, pairs.count, &provider)
        }
        if status != 0 { throw Failure("nghttp2_submit_response", Int(status)) }
    }

    private func readBody(into buffer: UnsafeMutablePointer<UInt8>, length: Int, flags: UnsafeMutablePointer<UInt32>) -> Int {
        let count = min(length, body.count - bodyOffset)
        body.withUnsafeBufferPointer { source in
            if count > 0, let base = source.baseAddress { buffer.update(from: base + bodyOffset, count: count) }
        }
        bodyOffset += count
        if bodyOffset == body.count { flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue }
        return count
    }

    /// Queues a GOAWAY (NO_ERROR) that lets streams up to `lastStreamID` finish: no new stream
    /// will be processed.
    public func goAway(lastStreamID: Int32) throws {
        guard let session else { return }
        let status = nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), lastStreamID, NGHTTP2_NO_ERROR.rawValue, nil, 0)
        if status != 0 { throw Failure("nghttp2_submit_goaway", Int(status)) }
    }

    /// The frames nghttp2 has ready to send (as flow control allows).
    public func takeOutput() throws -> [UInt8] {
        guard let session else { return [] }
        var output: [UInt8] = []
        while true {
            var data: UnsafePointer<UInt8>?
            let count = nghttp2_session_mem_send(session, &data)
            if count < 0 { throw Failure("writing HTTP/2 frames", count) }
            guard count > 0, let data else { return output }
            output.append(contentsOf: UnsafeBufferPointer(start: data, count: count))
        }
    }

    /// Runs `body` with `fields` as nghttp2 name-value pairs (nghttp2 copies them).
    private static func withNameValuePairs<T>(_ fields: [Field], _ body: (UnsafeMutableBufferPointer<nghttp2_nv>) -> T) -> T {
        let (packed, ranges) = HTTP2Field.packed(fields)
        var bytes = packed  // never empty, so the buffer has a base address
        return bytes.withUnsafeMutableBufferPointer { storage in
            guard let base = storage.baseAddress else { return body(UnsafeMutableBufferPointer(start: nil, count: 0)) }
            var pairs = ranges.map { range in
                nghttp2_nv(name: base + range.name.lowerBound, value: base + range.value.lowerBound, namelen: range.name.count,
                           valuelen: range.value.count, flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue))
            }
            return pairs.withUnsafeMutableBufferPointer { body($0) }
        }
    }
}
