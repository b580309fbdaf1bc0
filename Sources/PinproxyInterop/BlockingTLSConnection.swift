import Glibc
import Foundation
import COpenSSL
import CPinproxyShims

/// A direct, blocking TLS client connection, for the commands (`diagnose`) and the report
/// sender's own thread: never used on the daemon's event loops. It verifies nothing itself:
/// its caller runs the verdict on `chain` before it trusts the peer with a byte.
public final class BlockingTLSConnection {
    /// A protocol version to offer, alone.
    public enum Version: String, CaseIterable, Sendable {
        case tls13 = "TLS 1.3", tls12 = "TLS 1.2", tls11 = "TLS 1.1", tls10 = "TLS 1.0"

        var openSSLValue: Int32 {
            switch self {
            case .tls13: return TLS1_3_VERSION
            case .tls12: return TLS1_2_VERSION
            case .tls11: return TLS1_1_VERSION
            case .tls10: return TLS1_VERSION
            }
        }

        /// Versions below TLS 1.2 are deprecated (RFC 8996).
        public var isDeprecated: Bool { self == .tls11 || self == .tls10 }
    }

    private let context: OpaquePointer
    private let ssl: OpaquePointer
    private let socket: Int32

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

    /// Connects to `host` (a name to resolve, or an address literal) on `port`, sends SNI =
    /// `serverName` when given, offers only `version` (every version from 1.2 up when nil) and
    /// the `alpn` protocols, asks for an OCSP staple when `requestStaple`, and completes the
    /// handshake. Every read and write waits at most `timeout`.
    public init(host: String, port: UInt16, serverName: String?, version: Version? = nil, alpn: [String] = [],
                requestStaple: Bool = false, timeout: TimeInterval) throws {
        guard let context = SSL_CTX_new(TLS_client_method()) else { throw OpenSSLError.drain("SSL_CTX_new") }
        SSL_CTX_set_verify(context, SSL_VERIFY_NONE, nil)
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
        do { socket = try Self.connect(host: host, port: port, timeout: timeout) } catch {
            SSL_CTX_free(context)
            throw error
        }
        guard let ssl = SSL_new(context) else {
            close(socket)
            SSL_CTX_free(context)
            throw OpenSSLError.drain("SSL_new")
        }
        if let serverName { _ = pp_SSL_set_tlsext_host_name(ssl, serverName) }
        if requestStaple { _ = pp_SSL_set_tlsext_status_type_ocsp(ssl) }
        SSL_set_fd(ssl, socket)
        guard SSL_connect(ssl) == 1 else {
            let error = OpenSSLError.drain("the TLS handshake failed")
            SSL_free(ssl)
            close(socket)
            SSL_CTX_free(context)
            throw error
        }
        self.context = context
        self.ssl = ssl
        self.socket = socket

        var chain: [Certificate] = []
        if let stack = SSL_get_peer_cert_chain(ssl) {
            for index in 0..<pp_sk_X509_num(stack) {
                if let cert = pp_sk_X509_value(stack, index) { chain.append(Certificate(retaining: cert)) }
            }
        }
        self.chain = chain
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
    }

    deinit {
        _ = SSL_shutdown(ssl)
        SSL_free(ssl)
        close(socket)
        SSL_CTX_free(context)
    }

    /// Writes all of `bytes`.
    public func write(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            // offset < count: the bytes are not empty, so their base address is not nil.
            let count = bytes.withUnsafeBytes { SSL_write(ssl, $0.baseAddress! + offset, Int32(min(bytes.count - offset, 1 << 20))) }
            guard count > 0 else { throw OpenSSLError.drain("TLS write failed") }
            offset += Int(count)
        }
    }

    /// Reads up to `limit` bytes until the peer closes (or `limit` is reached).
    public func readAll(limit: Int) throws -> [UInt8] {
        var result: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while result.count < limit {
            let count = SSL_read(ssl, &buffer, Int32(buffer.count))
            if count <= 0 {
                let code = SSL_get_error(ssl, count)
                if code == SSL_ERROR_ZERO_RETURN || (code == SSL_ERROR_SYSCALL && result.count > 0) { break }
                if result.isEmpty { throw OpenSSLError.drain("TLS read failed") }
                break
            }
            result += buffer.prefix(Int(count))
        }
        return Array(result.prefix(limit))
    }

    /// A TCP connection to the first address of `host` that answers within `timeout`.
    static func connect(host: String, port: UInt16, timeout: TimeInterval) throws -> Int32 {
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
            let fd = Glibc.socket(info.pointee.ai_family, info.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue), info.pointee.ai_protocol)
            guard fd >= 0 else { continue }
            var limit = timeval(tv_sec: Int(timeout), tv_usec: Int((timeout - timeout.rounded(.down)) * 1_000_000))
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
            if Glibc.connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 { return fd }
            lastError = String(cString: strerror(errno))
            close(fd)
        }
        throw OpenSSLError(operation: "cannot connect to \(host):\(port)", messages: [lastError])
    }
}
