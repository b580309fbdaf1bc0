import Glibc
import FoundationEssentials
import COpenSSL
import CPinproxyShims
import PinproxyCore

/// A direct, blocking TLS client connection, for the commands (`diagnose`, `pin --connect`) and
/// the report sender's own thread: never used on the daemon's event loops. One deadline bounds
/// the connect, the handshake and every read and write. It verifies nothing itself: its caller
/// runs the verdict on `chain` before it trusts the peer with a byte.
public final class BlockingTLSConnection {
    /// A protocol version to offer, alone.
    public typealias Version = TLSProbeVersion

    /// A handshake that did not complete, with the certificates that had arrived.
    public struct HandshakeFailure: Error, CustomStringConvertible {
        /// Why: a `TimedOut`, or OpenSSL's (or the system's) error.
        public let cause: any Error
        /// The certificates the server had sent, leaf first; it has not proven it holds the
        /// leaf's key.
        public let chain: [Certificate]
        /// The protocol as far as it was negotiated, e.g. `TLSv1.2`.
        public let protocolVersion: String

        public var description: String { "\(cause)" }
    }

    private let context: OpaquePointer
    private let ssl: OpaquePointer
    private let socket: Int32
    private let deadline: Deadline
    /// `ADDRESS:PORT`, for messages.
    private let peer: String

    /// The negotiated protocol, e.g. `TLSv1.3`.
    public let version: String
    public let cipher: String
    /// The key exchange is ephemeral (every TLS 1.3 suite; ECDHE/DHE before it).
    public let forwardSecrecy: Bool
    /// The ALPN protocol the server selected, if any.
    public let alpn: String?
    /// The chain as presented, leaf first.
    public let chain: [Certificate]
    /// The stapled OCSP response (DER), when one was requested and sent.
    public let ocspStaple: [UInt8]?
    /// The SCTs of the TLS extension, when they were requested (`requestSCTs`) and sent.
    public let tlsExtensionSCTs: [[UInt8]]

    /// Connects to `host` (a name to resolve, or an address literal) on `port`, sends SNI =
    /// `serverName` when given, offers only `version` (every version from 1.2 up when nil) and
    /// the `alpn` protocols, asks for an OCSP staple when `requestStaple`, and completes the
    /// handshake, all before `deadline`; `write` and `readAll` have only what is left of it.
    /// Throws `TimedOut` or `OpenSSLError` when no connection was made, and `HandshakeFailure`
    /// when the handshake did not complete.
    public init(host: String, port: UInt16, serverName: String?, version: Version? = nil, alpn: [String] = [],
                requestStaple: Bool = false, requestSCTs: Bool = false, deadline: Deadline) throws {
        guard let context = SSL_CTX_new(TLS_client_method()) else { throw OpenSSLError.drain("SSL_CTX_new") }
        SSL_CTX_set_verify(context, SSL_VERIFY_NONE, nil)
        // A write that must wait is retried from wherever the buffer is then.
        _ = SSL_CTX_ctrl(context, SSL_CTRL_MODE, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER), nil)
        if let version {
            // A diagnosis must be able to see what a server still accepts, old versions included.
            SSL_CTX_set_security_level(context, 0)
            _ = SSL_CTX_set_cipher_list(context, "ALL:@SECLEVEL=0")
            _ = pp_SSL_CTX_set_min_proto_version(context, version.openSSLValue)
            _ = pp_SSL_CTX_set_max_proto_version(context, version.openSSLValue)
        } else {
            _ = pp_SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION)
        }
        if !alpn.isEmpty {
            let wire = alpn.flatMap { [UInt8($0.utf8.count)] + Array($0.utf8) }
            guard SSL_CTX_set_alpn_protos(context, wire, UInt32(wire.count)) == 0 else {
                SSL_CTX_free(context)
                throw OpenSSLError.drain("SSL_CTX_set_alpn_protos")
            }
        }
        let socket: Int32
        do { socket = try Self.connect(host: host, port: port, deadline: deadline) } catch {
            SSL_CTX_free(context)
            throw error
        }
        guard let ssl = SSL_new(context) else {
            close(socket)
            SSL_CTX_free(context)
            throw OpenSSLError.drain("SSL_new")
        }
        let peer = Self.peer(host, port)
        if let serverName { _ = pp_SSL_set_tlsext_host_name(ssl, serverName) }
        if requestStaple { _ = pp_SSL_set_tlsext_status_type_ocsp(ssl) }
        if requestSCTs { _ = pp_SSL_request_scts(ssl) }
        SSL_set_fd(ssl, socket)
        let handshake = Self.step(ssl, socket: socket, deadline: deadline) { SSL_connect(ssl) }
        guard let handshake, handshake.result == 1 else {
            let operation = "the TLS handshake with \(peer)"
            let cause: any Error = handshake.map { Self.failure(operation, code: $0.code, errno: $0.errno) } ?? deadline.timedOut(operation)
            let failure = HandshakeFailure(cause: cause, chain: Self.peerChain(ssl), protocolVersion: String(cString: SSL_get_version(ssl)))
            SSL_free(ssl)
            close(socket)
            SSL_CTX_free(context)
            throw failure
        }
        self.context = context
        self.ssl = ssl
        self.socket = socket
        self.deadline = deadline
        self.peer = peer

        chain = Self.peerChain(ssl)
        let cipher = SSL_get_current_cipher(ssl)
        let keyExchange = cipher.map { SSL_CIPHER_get_kx_nid($0) } ?? NID_undef
        self.cipher = cipher.map { String(cString: SSL_CIPHER_get_name($0)) } ?? "none"
        forwardSecrecy = [NID_kx_ecdhe, NID_kx_dhe, NID_kx_any, NID_kx_ecdhe_psk, NID_kx_dhe_psk].contains(keyExchange)
        self.version = String(cString: SSL_get_version(ssl))
        var selected: UnsafePointer<UInt8>?
        var selectedLength: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &selected, &selectedLength)
        self.alpn = selected.flatMap { selectedLength > 0 ? String(decoding: UnsafeBufferPointer(start: $0, count: Int(selectedLength)), as: UTF8.self) : nil }
        var staple: UnsafePointer<UInt8>?
        let stapleLength = requestStaple ? pp_SSL_get_tlsext_status_ocsp_resp(ssl, &staple) : -1
        ocspStaple = staple.flatMap { stapleLength > 0 ? Array(UnsafeBufferPointer(start: $0, count: stapleLength)) : nil }
        tlsExtensionSCTs = requestSCTs ? SignedCertificateTimestamps.tlsExtension(of: ssl) : []
    }

    deinit {
        // One attempt at close_notify, never a wait: the socket is non-blocking.
        _ = SSL_shutdown(ssl)
        SSL_free(ssl)
        close(socket)
        SSL_CTX_free(context)
    }

    /// Writes all of `bytes`, before the deadline.
    public func write(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let chunk = Int32(min(bytes.count - offset, 1 << 20))
            let written = Self.step(ssl, socket: socket, deadline: deadline) {
                // offset < count: the bytes are not empty, so their base address is not nil.
                bytes.withUnsafeBytes { SSL_write(ssl, $0.baseAddress! + offset, chunk) }
            }
            guard let written else { throw deadline.timedOut("sending to \(peer)") }
            guard written.result > 0 else { throw Self.failure("TLS write to \(peer)", code: written.code, errno: written.errno) }
            offset += Int(written.result)
        }
    }

    /// Reads up to `limit` bytes until the peer closes, `limit` is reached or the deadline
    /// passes (an error only when nothing arrived).
    public func readAll(limit: Int) throws -> [UInt8] {
        var result: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while result.count < limit {
            let read = Self.step(ssl, socket: socket, deadline: deadline) { SSL_read(ssl, &buffer, Int32(buffer.count)) }
            guard let read else {
                if result.isEmpty { throw deadline.timedOut("waiting for an answer from \(peer)") }
                break
            }
            if read.result <= 0 {
                if read.code == SSL_ERROR_ZERO_RETURN || (read.code == SSL_ERROR_SYSCALL && !result.isEmpty) { break }
                if result.isEmpty { throw Self.failure("TLS read from \(peer)", code: read.code, errno: read.errno) }
                break
            }
            result += buffer.prefix(Int(read.result))
        }
        return Array(result.prefix(limit))
    }

    /// A TCP connection to the first address of `host` that answers, all before `deadline`.
    static func connect(host: String, port: UInt16, deadline: Deadline) throws -> Int32 {
        guard deadline.remaining > 0 else { throw deadline.timedOut("connecting to \(peer(host, port))") }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &list)
        guard status == 0, let list else {
            throw OpenSSLError(operation: "cannot resolve \(host)", messages: [String(cString: gai_strerror(status))])
        }
        defer { freeaddrinfo(list) }
        var lastError = "no address"
        var cursor: UnsafeMutablePointer<addrinfo>? = list
        while let info = cursor {
            cursor = info.pointee.ai_next
            let type = info.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue)
            let fd = Glibc.socket(info.pointee.ai_family, type, info.pointee.ai_protocol)
            guard fd >= 0 else { continue }
            if Glibc.connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 { return fd }
            var code = errno
            if code == EINPROGRESS {
                guard deadline.wait(fd, for: Int16(POLLOUT)) else {
                    close(fd)
                    throw deadline.timedOut("connecting to \(peer(host, port))")
                }
                var length = socklen_t(MemoryLayout<Int32>.size)
                if getsockopt(fd, SOL_SOCKET, SO_ERROR, &code, &length) != 0 { code = errno }
                if code == 0 { return fd }
            }
            lastError = String(cString: strerror(code))
            close(fd)
        }
        throw OpenSSLError(operation: "cannot connect to \(peer(host, port))", messages: [lastError])
    }

    /// `HOST:PORT`, an IPv6 literal in brackets.
    private static func peer(_ host: String, _ port: UInt16) -> String {
        "\(host.contains(":") ? "[\(host)]" : host):\(port)"
    }

    /// One OpenSSL call on the non-blocking `socket` (`SSL_connect`, `SSL_read`, `SSL_write`),
    /// repeated whenever it asks to wait, after poll() says the socket is ready, for no longer
    /// than the deadline leaves: its result, `SSL_get_error`'s code and errno for it; nil when
    /// the deadline passed first.
    private static func step(_ ssl: OpaquePointer, socket: Int32, deadline: Deadline,
                             _ call: () -> Int32) -> (result: Int32, code: Int32, errno: Int32)? {
        while true {
            ERR_clear_error()
            errno = 0
            let result = call()
            if result > 0 { return (result, SSL_ERROR_NONE, 0) }
            let code = SSL_get_error(ssl, result)
            let events: Int32
            switch code {
            case SSL_ERROR_WANT_READ: events = POLLIN
            case SSL_ERROR_WANT_WRITE: events = POLLOUT
            default: return (result, code, errno)
            }
            guard deadline.wait(socket, for: Int16(events)) else { return nil }
        }
    }

    /// The error of a failed call: OpenSSL's messages, else the system's, else the peer's close.
    private static func failure(_ operation: String, code: Int32, errno systemError: Int32) -> OpenSSLError {
        let failure = OpenSSLError.drain("\(operation) failed")
        guard failure.messages.isEmpty else { return failure }
        if code == SSL_ERROR_SYSCALL && systemError != 0 {
            return OpenSSLError(operation: failure.operation, messages: [String(cString: strerror(systemError))])
        }
        return code == SSL_ERROR_SYSCALL || code == SSL_ERROR_ZERO_RETURN
            ? OpenSSLError(operation: failure.operation, messages: ["the server closed the connection"]) : failure
    }

    /// The certificates the server has sent so far, leaf first.
    private static func peerChain(_ ssl: OpaquePointer) -> [Certificate] {
        var chain: [Certificate] = []
        if let stack = SSL_get_peer_cert_chain(ssl) {
            for index in 0..<pp_sk_X509_num(stack) {
                if let cert = pp_sk_X509_value(stack, index) { chain.append(Certificate(retaining: cert)) }
            }
        }
        return chain
    }
}

extension TLSProbeVersion {
    var openSSLValue: Int32 {
        switch self {
        case .tls13: return TLS1_3_VERSION
        case .tls12: return TLS1_2_VERSION
        case .tls11: return TLS1_1_VERSION
        case .tls10: return TLS1_VERSION
        }
    }
}
