/// An error from OpenSSL, with the messages drained from its thread-local error queue.
public struct OpenSSLError: Error, CustomStringConvertible, Sendable {
    /// What pinproxy was doing when OpenSSL failed.
    public let operation: String
    /// OpenSSL's own messages, oldest first.
    public let messages: [String]

    package init(operation: String, messages: [String]) {
        self.operation = operation
        self.messages = messages
    }

    public var description: String {
        messages.isEmpty ? operation : "\(operation): \(messages.joined(separator: "; "))"
    }
}

/// Whether `code` is an OpenSSL error code: a system error, or one with a library. libevent's
/// TLS bufferevent queues the `SSL_get_error` result of a failed call among the real errors
/// (`SSL_ERROR_SSL` = 1, `SSL_ERROR_SYSCALL` = 5); printed as an error code, that would read
/// `error:00000001:lib(0)::reason(1)`.
package func isOpenSSLErrorCode(_ code: UInt) -> Bool {
    let systemFlag: UInt = 0x8000_0000  // ERR_SYSTEM_FLAG
    return code & systemFlag != 0 || (code >> 23) & 0xFF != 0  // ERR_LIB_OFFSET, ERR_LIB_MASK
}
