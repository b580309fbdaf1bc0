import Glibc
import FoundationEssentials
import COpenSSL
import CPinproxyShims
import PinproxyCore

extension PEMBlocks {
    /// The DER of every block of `bytes`, each of one of `types` (the word after BEGIN); `what`
    /// names the content in errors ("certificate", "CRL").
    static func read(_ bytes: [UInt8], types: Set<String>, what: String) throws(X509ParseError) -> [Block] {
        guard let length = Int32(exactly: bytes.count) else {
            throw X509ParseError(description: "is larger than OpenSSL can read")
        }
        let begins = Self.beginLines(bytes)
        var blocks: [Block] = []
        let failure: X509ParseError? = bytes.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, length) else {
                return X509ParseError(description: "cannot be read: \(OpenSSLError.drain("BIO_new_mem_buf"))")
            }
            defer { BIO_free(bio) }
            // The BEGIN lines not yet read: OpenSSL reads the next block after `consumed`.
            var next = 0
            while true {
                let number = blocks.count + 1
                let place = "block \(number)" + (next < begins.count ? ", line \(begins[next].line)" : "")
                var name: UnsafeMutablePointer<CChar>?
                var header: UnsafeMutablePointer<CChar>?
                var data: UnsafeMutablePointer<UInt8>?
                var dataLength = 0
                guard PEM_read_bio(bio, &name, &header, &data, &dataLength) == 1 else {
                    let messages = drainErrorQueue()
                    // Every BEGIN line read: the input has ended.
                    if next == begins.count { return nil }
                    let why = messages.isEmpty ? "" : ": " + messages.joined(separator: "; ")
                    return X509ParseError(description: "holds a malformed PEM block (\(place))\(why)")
                }
                defer {
                    pp_OPENSSL_free(name)
                    pp_OPENSSL_free(header)
                    pp_OPENSSL_free(data)
                }
                // A BEGIN line OpenSSL passed over as text is a block it could not read.
                let consumed = bytes.count - Int(BIO_ctrl_pending(bio))
                let read = begins[next...].prefix { $0.offset < consumed }.count
                if read != 1 {
                    return X509ParseError(description: "holds a malformed PEM block (\(place))")
                }
                next += 1
                let type = name.map { String(cString: $0) } ?? ""
                guard types.contains(type) else {
                    return X509ParseError(description: "holds a \(type) block (\(place)) where only \(types.sorted()[0]) blocks belong")
                }
                if let header, header.pointee != 0 {
                    return X509ParseError(description: "holds an encrypted or annotated \(type) block (\(place))")
                }
                let der = data.map { Array(UnsafeBufferPointer(start: $0, count: dataLength)) } ?? []
                blocks.append(Block(der: der, number: number, line: begins[next - 1].line))
            }
        }
        if let failure { throw failure }
        guard !blocks.isEmpty else { throw X509ParseError(description: "holds no PEM or DER \(what)") }
        return blocks
    }
}
