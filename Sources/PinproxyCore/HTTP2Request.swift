/// The first request of an HTTP/2 connection, once its header block is complete
/// (`HTTP2ServerSession.Request`).
public struct HTTP2Request: Sendable {
    public let streamID: Int32
    /// Its header fields in order, pseudo-header fields (`:method`, `:path`) included, up to
    /// `maximumFieldBytes`; nghttp2 has checked they are well-formed (lower-case names).
    public let fields: [HTTP2Field]
    /// Whether fields past `maximumFieldBytes` were left out.
    public let truncated: Bool

    public init(streamID: Int32, fields: [HTTP2Field], truncated: Bool) {
        self.streamID = streamID
        self.fields = fields
        self.truncated = truncated
    }

    /// The value of the first field called `name` (lower case).
    public func value(of name: String) -> String? {
        fields.first { $0.name == name }?.value
    }
}

/// One HTTP/2 header field (`HTTP2ServerSession.Field`).
public struct HTTP2Field: Sendable, Equatable {
    public let name: String
    public let value: String

    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }

    /// The names and values of `fields` one after the other, and where each lies; with a
    /// trailing zero, so that the bytes are never empty.
    public static func packed(_ fields: [HTTP2Field]) -> (bytes: [UInt8], ranges: [(name: Range<Int>, value: Range<Int>)]) {
        var bytes: [UInt8] = []
        var ranges: [(name: Range<Int>, value: Range<Int>)] = []
        for field in fields {
            let name = bytes.count..<(bytes.count + field.name.utf8.count)
            bytes += field.name.utf8
            let value = bytes.count..<(bytes.count + field.value.utf8.count)
            bytes += field.value.utf8
            ranges.append((name, value))
        }
        bytes.append(0)
        return (bytes, ranges)
    }
}

/// The header fields of one request as they arrive: at most `maximumBytes` of them, counted as
/// HPACK does (name, value and 32 bytes each); the fields past that are left out.
public struct HTTP2FieldCollector: Sendable {
    public let maximumBytes: Int
    public private(set) var fields: [HTTP2Field] = []
    /// Whether fields past `maximumBytes` were left out.
    public private(set) var truncated = false
    private var bytes = 0

    public init(maximumBytes: Int) {
        self.maximumBytes = maximumBytes
    }

    /// Adds a field, unless it or an earlier one is past the limit.
    public mutating func append(name: some Collection<UInt8>, value: some Collection<UInt8>) {
        guard !truncated else { return }
        let size = name.count + value.count + 32
        guard bytes + size <= maximumBytes else {
            truncated = true
            return
        }
        bytes += size
        fields.append(HTTP2Field(String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self)))
    }
}
