import Glibc
import COpenSSL
import CPinproxyShims
import PinproxyCore

/// The extension type of Encrypted Client Hello (draft-ietf-tls-esni).
let encryptedClientHelloExtension: UInt32 = 0xfe0d

/// Reads a client's ClientHello from the bytes buffered on its connection, without consuming
/// them: OpenSSL parses them on a throwaway SSL (memory BIOs) whose ClientHello callback
/// records the offer and stops the handshake there. The real handshake then reads the same
/// bytes. Used to learn the client's ALPN offer while the upstream can still be asked again,
/// and, on the transparent listener, the host it wants (SNI).
public final class ClientHelloReader {
    /// Where reading stands: `unreadable` is a ClientHello OpenSSL does not accept (or one
    /// larger than `maximumBytes`).
    public typealias Progress = ClientHelloProgress

    /// More than this without a complete ClientHello is unreadable.
    public static let maximumBytes = 256 * 1024

    private let ssl: OpaquePointer
    private let input: OpaquePointer
    private var fed = 0
    private var hello: ClientHello?
    private var malformed = false

    public init() throws {
        guard let context = probeContext else { throw OpenSSLError(operation: "the ClientHello reader has no SSL_CTX", messages: []) }
        guard let ssl = SSL_new(context.handle) else { throw OpenSSLError.drain("SSL_new") }
        guard let input = BIO_new(BIO_s_mem()), let output = BIO_new(BIO_s_mem()) else {
            SSL_free(ssl)
            throw OpenSSLError.drain("BIO_new")
        }
        SSL_set_bio(ssl, input, output)
        SSL_set_accept_state(ssl)
        self.ssl = ssl
        self.input = input
        _ = pp_SSL_set_app_data(ssl, Unmanaged.passUnretained(self).toOpaque())
    }

    deinit {
        SSL_free(ssl)
    }

    /// Feeds the bytes `connection` received since the last call, and says where reading stands.
    public func read(from connection: BufferEvent) -> Progress {
        if let hello { return .hello(hello) }
        let bytes = connection.copyInput(from: fed, maxLength: Self.maximumBytes + 1 - fed)
        if !bytes.isEmpty {
            guard BIO_write(input, bytes, Int32(bytes.count)) == Int32(bytes.count) else {
                _ = drainErrorQueue()
                return .unreadable
            }
            fed += bytes.count
        }
        let result = SSL_do_handshake(ssl)
        let error = SSL_get_error(ssl, result)
        _ = drainErrorQueue()
        if let hello { return .hello(hello) }
        guard !malformed, error == SSL_ERROR_WANT_READ, fed <= Self.maximumBytes else { return .unreadable }
        return .incomplete
    }

    /// Called by OpenSSL once the whole ClientHello has arrived.
    fileprivate func received(_ ssl: OpaquePointer) {
        guard let serverName = Self.extensionBody(ssl, TLSEXT_TYPE_server_name, { ClientHello.serverName(inList: Array($0)) }),
              let alpn = Self.extensionBody(ssl, TLSEXT_TYPE_application_layer_protocol_negotiation, { ALPNOffer(wire: Array($0)) }) else {
            malformed = true
            return
        }
        var body: UnsafePointer<UInt8>?
        var length = 0
        let encrypted = SSL_client_hello_get0_ext(ssl, encryptedClientHelloExtension, &body, &length) == 1
        hello = ClientHello(alpn: alpn, serverName: serverName, offersEncryptedClientHello: encrypted)
    }

    /// The body of extension `type` after its own two-byte length, read by `parse`: `.some(nil)`
    /// when the client did not send it, nil when it is malformed.
    private static func extensionBody<T>(_ ssl: OpaquePointer, _ type: Int32, _ parse: (UnsafeBufferPointer<UInt8>) -> T?) -> T?? {
        var body: UnsafePointer<UInt8>?
        var length = 0
        guard SSL_client_hello_get0_ext(ssl, UInt32(type), &body, &length) == 1 else { return .some(nil) }
        let bytes = UnsafeBufferPointer(start: body, count: length)
        guard length >= 2, Int(bytes[0]) << 8 | Int(bytes[1]) == length - 2, let value = parse(UnsafeBufferPointer(rebasing: bytes[2...])) else {
            return nil
        }
        return .some(value)
    }
}

/// The SSL_CTX of the ClientHello readers. Its callback runs before anything else the server
/// side does with a ClientHello, so it needs no certificate.
private final class ProbeContext: @unchecked Sendable {
    let handle: OpaquePointer

    init?() {
        guard let handle = SSL_CTX_new(TLS_server_method()) else { return nil }
        self.handle = handle
        // OpenSSL 3.0 keeps only the extensions it knows for SSL_client_hello_get0_ext: ECH is
        // made one it knows (a custom extension that adds nothing and accepts anything).
        _ = SSL_CTX_add_custom_ext(handle, encryptedClientHelloExtension, UInt32(SSL_EXT_CLIENT_HELLO), nil, nil, nil, nil, nil)
        SSL_CTX_set_client_hello_cb(handle, { ssl, _, _ in
            guard let ssl, let reader = pp_SSL_get_app_data(ssl) else { return SSL_CLIENT_HELLO_ERROR }
            Unmanaged<ClientHelloReader>.fromOpaque(reader).takeUnretainedValue().received(ssl)
            return SSL_CLIENT_HELLO_RETRY
        }, nil)
    }
}

private let probeContext = ProbeContext()

// MARK: - The intercepting handshake's answers to a ClientHello

/// What one intercepted client must send and will get: the SNI it may send (nil: any) and the
/// ALPN protocols it may be given, in pinproxy's order of preference (the one the upstream
/// negotiated; h2 then http/1.1 for an in-TLS refusal; none: no ALPN): it gets the first that
/// it offers. Held by the client-side SSL in its own ex_data slot, and released when OpenSSL
/// frees that SSL.
final class ClientHelloTerms {
    let serverName: ExpectedServerName
    let applicationProtocols: [ALPNProtocol]

    init(serverName: String?, applicationProtocols: [ALPNProtocol]) {
        self.serverName = ExpectedServerName(serverName)
        self.applicationProtocols = applicationProtocols
    }

    /// Attaches these terms to `ssl` (which then owns a reference).
    func attach(to ssl: OpaquePointer) -> Bool {
        let retained = Unmanaged.passRetained(self)
        guard SSL_set_ex_data(ssl, clientHelloTermsIndex, retained.toOpaque()) == 1 else {
            retained.release()
            return false
        }
        return true
    }

    static func of(_ ssl: OpaquePointer?) -> ClientHelloTerms? {
        guard let ssl, let pointer = SSL_get_ex_data(ssl, clientHelloTermsIndex) else { return nil }
        return Unmanaged<ClientHelloTerms>.fromOpaque(pointer).takeUnretainedValue()
    }

    /// Installs the SNI check and the ALPN selection on a server context.
    static func install(on context: OpaquePointer) {
        pp_SSL_CTX_set_tlsext_servername_callback(context) { ssl, alert, _ in
            guard let terms = ClientHelloTerms.of(ssl) else { return SSL_TLSEXT_ERR_OK }
            let sent = ssl.flatMap { SSL_get_servername($0, TLSEXT_NAMETYPE_host_name) }.map { String(cString: $0) }
            if terms.serverName.accepts(sent) { return SSL_TLSEXT_ERR_OK }
            alert?.pointee = SSL_AD_UNRECOGNIZED_NAME
            return SSL_TLSEXT_ERR_ALERT_FATAL
        }
        SSL_CTX_set_alpn_select_cb(context, { ssl, out, outLength, offered, offeredLength, _ in
            guard let terms = ClientHelloTerms.of(ssl), let offered,
                  let range = terms.applicationProtocols.lazy.compactMap({
                      ALPNOffer.range(of: $0, inWire: Array(UnsafeBufferPointer(start: offered, count: Int(offeredLength))))
                  }).first else {
                return SSL_TLSEXT_ERR_NOACK
            }
            out?.pointee = offered + range.lowerBound
            outLength?.pointee = UInt8(range.count)
            return SSL_TLSEXT_ERR_OK
        }, nil)
    }
}

/// The ex_data slot of `ClientHelloTerms`; OpenSSL releases the reference when it frees the SSL.
private let clientHelloTermsIndex: Int32 = CRYPTO_get_ex_new_index(CRYPTO_EX_INDEX_SSL, 0, nil, nil, nil) { _, pointer, _, _, _, _ in
    guard let pointer else { return }
    Unmanaged<ClientHelloTerms>.fromOpaque(pointer).release()
}
