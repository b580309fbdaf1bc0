/// One ALPN protocol identifier (RFC 7301): 1 to 255 bytes, compared byte for byte.
public struct ALPNProtocol: Hashable, Sendable, CustomStringConvertible {
    public let bytes: [UInt8]

    public init?(bytes: [UInt8]) {
        guard (1...255).contains(bytes.count) else { return nil }
        self.bytes = bytes
    }

    // Literals of 2 and 8 bytes, within 1...255: never nil.
    public static let h2 = ALPNProtocol(bytes: Array("h2".utf8))!
    public static let http11 = ALPNProtocol(bytes: Array("http/1.1".utf8))!

    /// The identifier as text (the log escapes what needs it).
    public var description: String { String(decoding: bytes, as: UTF8.self) }
}

/// An ordered ALPN offer, as a client sends it.
public struct ALPNOffer: Hashable, Sendable, CustomStringConvertible {
    public let protocols: [ALPNProtocol]

    public init(_ protocols: [ALPNProtocol]) {
        self.protocols = protocols
    }

    /// Reads the wire form: a list of length-prefixed identifiers (the ALPN extension's body
    /// after its own two-byte length). Nil when it is malformed or empty.
    public init?(wire: [UInt8]) {
        var protocols: [ALPNProtocol] = []
        var index = 0
        while index < wire.count {
            let length = Int(wire[index])
            guard length > 0, index + 1 + length <= wire.count,
                  let name = ALPNProtocol(bytes: Array(wire[(index + 1)..<(index + 1 + length)])) else { return nil }
            protocols.append(name)
            index += 1 + length
        }
        guard !protocols.isEmpty else { return nil }
        self.protocols = protocols
    }

    /// Where `wanted` sits in a client's wire-format offer (the identifier's bytes).
    public static func range(of wanted: ALPNProtocol, inWire offer: [UInt8]) -> Range<Int>? {
        var index = 0
        while index < offer.count {
            let length = Int(offer[index])
            let range = (index + 1)..<(index + 1 + length)
            guard range.upperBound <= offer.count else { return nil }
            if offer[range].elementsEqual(wanted.bytes) { return range }
            index = range.upperBound
        }
        return nil
    }

    /// The wire form SSL_set_alpn_protos takes.
    public var wire: [UInt8] {
        protocols.flatMap { [UInt8($0.bytes.count)] + $0.bytes }
    }

    public var description: String { protocols.map(\.description).joined(separator: ",") }

    /// What pinproxy offers every upstream first: h2, then http/1.1. Most clients offer both,
    /// so whichever the server picks is one they accept.
    public static let upstreamDefault = ALPNOffer([.h2, .http11])

    /// What an upstream is offered for a client that offers no ALPN: http/1.1, the protocol
    /// such a client speaks.
    public static let noClientOffer = ALPNOffer([.http11])
}
