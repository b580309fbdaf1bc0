import Glibc
import FoundationEssentials
import COpenSSL
import CPinproxyShims
import PinproxyCore

extension OpenSSLError {
    /// Captures and clears the calling thread's OpenSSL error queue.
    static func drain(_ operation: String) -> OpenSSLError {
        OpenSSLError(operation: operation, messages: drainErrorQueue())
    }
}

/// Reads and clears the calling thread's OpenSSL error queue.
func drainErrorQueue() -> [String] {
    var messages: [String] = []
    while true {
        let code = ERR_get_error()
        if code == 0 { break }
        messages.append(errorString(code))
    }
    return messages
}

/// OpenSSL's text for an error-queue code (`error:0A000086:SSL routines::certificate verify failed`).
func errorString(_ code: UInt) -> String {
    var buffer = [CChar](repeating: 0, count: 256)
    ERR_error_string_n(code, &buffer, buffer.count)
    return string(fromNulTerminated: buffer)
}

/// The text of a NUL-terminated C buffer that C code filled (UTF-8; invalid bytes replaced).
func string(fromNulTerminated buffer: [CChar]) -> String {
    String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// Serialises an OpenSSL object with its `i2d_*` function.
func derEncode(_ encode: (UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?) -> Int32) -> [UInt8] {
    let length = encode(nil)
    guard length > 0 else { return [] }
    var bytes = [UInt8](repeating: 0, count: Int(length))
    bytes.withUnsafeMutableBufferPointer { buffer in
        var cursor = buffer.baseAddress
        _ = encode(&cursor)
    }
    return bytes
}

/// Reads everything written to a memory BIO and frees it.
func withMemoryBIO(_ write: (OpaquePointer) -> Void) -> String {
    guard let bio = BIO_new(BIO_s_mem()) else { return "" }
    defer { BIO_free(bio) }
    write(bio)
    var data: UnsafeMutablePointer<CChar>?
    let length = pp_BIO_get_mem_data(bio, &data)
    guard let data, length > 0 else { return "" }
    return String(decoding: UnsafeRawBufferPointer(start: data, count: Int(length)), as: UTF8.self)
}

/// Converts an ASN1_TIME to a Date.
func date(from time: UnsafePointer<ASN1_TIME>?) -> Date? {
    guard let time else { return nil }
    var parts = tm()
    guard ASN1_TIME_to_tm(time, &parts) == 1 else { return nil }
    return Date(timeIntervalSince1970: TimeInterval(timegm(&parts)))
}

/// An X509_NAME in RFC 2253 form.
func formatName(_ name: OpaquePointer?) -> String {
    guard let name else { return "" }
    return withMemoryBIO { bio in _ = X509_NAME_print_ex(bio, name, 0, pp_name_print_flags()) }
}
