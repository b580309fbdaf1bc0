/// Raw control characters in config text. TOML allows none but tab and line breaks (LF, CRLF)
/// outside escapes, and toml++ (under TOMLKit) asserts on some of them (one right after the
/// `[` of a table header aborts the process): the loader refuses them before parsing. U+0000
/// is left to `SourceIndex.nulLine`, which also finds it as an escape.
enum ConfigText {
    /// The 1-based line and the byte of the first forbidden control character; nil when none.
    static func firstControlCharacter(in text: String) -> (line: Int, byte: UInt8)? {
        var line = 1
        var previous: UInt8 = 0
        for byte in text.utf8 {
            if previous == 0x0D, byte != 0x0A { return (line, previous) }
            switch byte {
            case 0x0A: line += 1
            case 0x01...0x08, 0x0B, 0x0C, 0x0E...0x1F, 0x7F: return (line, byte)
            default: break
            }
            previous = byte
        }
        return previous == 0x0D ? (line, previous) : nil
    }
}
