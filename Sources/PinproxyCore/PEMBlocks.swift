/// Why the bytes of a certificate, chain or CRL file cannot be used, in words that follow the
/// file's name: `"bundle.pem" holds a malformed PEM block (block 3, line 25): …`.
public struct X509ParseError: Error, Sendable, CustomStringConvertible {
    public let description: String

    package init(description: String) {
        self.description = description
    }
}

/// The PEM blocks of a file, every one read by OpenSSL and none skipped: a block OpenSSL cannot
/// read, or one of another type, is an error naming it, never the silent end of a bundle.
/// Text outside the blocks (RFC 7468's explanatory text) is allowed. Interop reads them
/// (`PEMBlocks.read`); this finds where they begin.
public enum PEMBlocks {
    /// One block: its DER bytes, its position and the line of its BEGIN line.
    public struct Block {
        public let der: [UInt8]
        public let number: Int
        public let line: Int

        package init(der: [UInt8], number: Int, line: Int) {
            self.der = der
            self.number = number
            self.line = line
        }
    }

    /// The offset and line number of every line that starts (after blanks) with `-----BEGIN`.
    public static func beginLines(_ bytes: [UInt8]) -> [(offset: Int, line: Int)] {
        let marker = Array("-----BEGIN".utf8)
        var lines: [(offset: Int, line: Int)] = []
        var line = 1
        var index = 0
        while index < bytes.count {
            var start = index
            while start < bytes.count && (bytes[start] == 0x20 || bytes[start] == 0x09) { start += 1 }
            if bytes[start...].starts(with: marker) { lines.append((index, line)) }
            guard let newline = bytes[index...].firstIndex(of: 0x0A) else { break }
            index = newline + 1
            line += 1
        }
        return lines
    }

    /// A block whose DER does not parse as `what`.
    public static func invalid(_ block: Block, _ what: String) -> X509ParseError {
        X509ParseError(description: "holds a PEM block that is not a valid \(what) (block \(block.number), line \(block.line))")
    }
}

extension Array where Element == UInt8 {
    /// Whether the bytes look like PEM text rather than DER.
    public var isPEM: Bool {
        let marker = Array("-----BEGIN".utf8)
        guard count >= marker.count else { return false }
        for start in 0...(count - marker.count) where self[start] == marker[0] {
            if Array(self[start..<start + marker.count]) == marker { return true }
        }
        return false
    }
}
