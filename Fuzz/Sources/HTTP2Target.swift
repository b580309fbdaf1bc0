import PinproxyInterop
import PinproxyPolicy
@testable import PinproxyProxy

/// What a client sends an in-TLS refusal over h2 (`HTTP2Refusal`, nghttp2 underneath): the
/// first byte sets the size of the pieces the rest arrives in. What the refusal sends back must
/// be whole HTTP/2 frames: its SETTINGS, at most one response on one client stream, and once
/// it says it has answered, a GOAWAY last; after that it takes nothing more.
enum HTTP2Target {
    static let page = RefusalResponse.Page(
        status: 403, reason: .pinMismatch, detail: "pin-mismatch: none of the 2 public-key pin(s) matches the verified chain",
        host: "api.test", port: 443, entry: "hosts.\"api.test\"", configPath: "/etc/pinproxy/pinproxy.toml",
        presented: [], pinKind: "public-key", pins: [])

    static func run(_ input: [UInt8]) {
        guard let first = input.first, let refusal = try? HTTP2Refusal(page: page) else { return }
        let piece = Int(first) + 1
        var output = refusal.start()
        let client = Array(input.dropFirst())
        var offset = 0
        while offset < client.count {
            let bytes = Array(client[offset..<min(client.count, offset + piece)])
            offset += bytes.count
            let wasReading = refusal.progress == .reading
            let sent = refusal.receive(bytes)
            fuzzCheck(wasReading || sent.isEmpty, "bytes sent after the exchange ended")
            output += sent
        }
        let frames = parseFrames(output)
        fuzzCheck(frames != nil, "the output is not whole HTTP/2 frames")
        guard let frames else { return }
        fuzzCheck(frames.first?.type == 4 && frames.first?.stream == 0, "the output does not start with SETTINGS")
        let responseStreams = Set(frames.filter { $0.type == 1 }.map(\.stream))
        fuzzCheck(responseStreams.count <= 1 && responseStreams.allSatisfy { $0 % 2 == 1 }, "responses on streams \(responseStreams)")
        if refusal.progress == .answered {
            fuzzCheck(responseStreams.count == 1, "answered without a response")
            fuzzCheck(frames.last?.type == 7, "answered without a GOAWAY last")
        }
    }

    /// The frames of `bytes` (type and stream), or nil when they do not end at a frame boundary.
    static func parseFrames(_ bytes: [UInt8]) -> [(type: UInt8, stream: UInt32)]? {
        var frames: [(type: UInt8, stream: UInt32)] = []
        var index = 0
        while index < bytes.count {
            guard index + 9 <= bytes.count else { return nil }
            let length = Int(bytes[index]) << 16 | Int(bytes[index + 1]) << 8 | Int(bytes[index + 2])
            let stream = bytes[(index + 5)..<(index + 9)].reduce(UInt32(0)) { $0 << 8 | UInt32($1) } & 0x7fff_ffff
            frames.append((bytes[index + 3], stream))
            index += 9 + length
        }
        return index == bytes.count ? frames : nil
    }
}
