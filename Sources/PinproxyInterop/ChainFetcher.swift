import Glibc
import Foundation
import COpenSSL
import CPinproxyShims

/// Fetches the chain a live server presents, with a direct blocking TLS connection: for the
/// `pinproxy pin --connect` command only, never for the daemon's event loops.
public enum ChainFetcher {
    /// What the server presented.
    public struct Result {
        /// The chain as presented, leaf first.
        public let chain: [Certificate]
        /// The negotiated protocol, e.g. `TLSv1.3`.
        public let protocolVersion: String
        /// Why the handshake did not complete, when the server sent its certificates and then
        /// stalled or failed (the chain is then what arrived, and the server has not proven
        /// it holds the leaf's key); nil after a complete handshake.
        public let incompleteHandshake: String?
    }

    /// Connects to `host`:`port` (each resolved address in turn), sends SNI = `serverName` when
    /// given, completes a handshake without verifying, and returns the presented chain; if
    /// the handshake fails after the certificates arrived, returns them with the failure.
    public static func fetch(host: String, port: UInt16, serverName: String?, timeout: TimeInterval) throws -> Result {
        let socket = try BlockingTLSConnection.connect(host: host, port: port, timeout: timeout)
        defer { close(socket) }
        guard let context = SSL_CTX_new(TLS_client_method()) else { throw OpenSSLError.drain("SSL_CTX_new") }
        defer { SSL_CTX_free(context) }
        SSL_CTX_set_verify(context, SSL_VERIFY_NONE, nil)
        guard let ssl = SSL_new(context) else { throw OpenSSLError.drain("SSL_new") }
        defer { SSL_free(ssl) }
        if let serverName { _ = pp_SSL_set_tlsext_host_name(ssl, serverName) }
        SSL_set_fd(ssl, socket)
        errno = 0
        guard SSL_connect(ssl) == 1 else {
            let code = errno
            var failure = OpenSSLError.drain("TLS handshake with \(host):\(port) failed")
            if code == EAGAIN || code == EWOULDBLOCK {
                failure = OpenSSLError(operation: failure.operation, messages: failure.messages + ["no answer within \(Int(timeout)) s"])
            } else if failure.messages.isEmpty && code != 0 {
                failure = OpenSSLError(operation: failure.operation, messages: [String(cString: strerror(code))])
            }
            let chain = peerChain(ssl)
            guard !chain.isEmpty else { throw failure }
            return Result(chain: chain, protocolVersion: String(cString: SSL_get_version(ssl)), incompleteHandshake: failure.description)
        }
        let chain = peerChain(ssl)
        let version = String(cString: SSL_get_version(ssl))
        _ = SSL_shutdown(ssl)
        return Result(chain: chain, protocolVersion: version, incompleteHandshake: nil)
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
