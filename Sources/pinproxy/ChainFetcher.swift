import FoundationEssentials
import PinproxyCore
import PinproxyInterop

/// Fetches the chain a live server presents, with a direct blocking TLS connection: for the
/// `pinproxy pin --connect` command only, never for the daemon's event loops.
enum ChainFetcher {
    /// What the server presented.
    struct Result {
        /// The chain as presented, leaf first.
        let chain: [Certificate]
        /// The negotiated protocol, e.g. `TLSv1.3`.
        let protocolVersion: String
        /// Why the handshake did not complete, when the server sent its certificates and then
        /// stalled, failed or ran out of time (the chain is then what arrived, and the server
        /// has not proven it holds the leaf's key); nil after a complete handshake.
        let incompleteHandshake: String?
    }

    /// Connects to `host`:`port` (each resolved address in turn), sends SNI = `serverName` when
    /// given, completes a handshake without verifying, and returns the presented chain, all
    /// before `deadline`; if the handshake fails or times out after the certificates arrived,
    /// returns them with the failure.
    static func fetch(host: String, port: UInt16, serverName: String?, deadline: Deadline) throws -> Result {
        do {
            let connection = try BlockingTLSConnection(host: host, port: port, serverName: serverName, deadline: deadline)
            return Result(chain: connection.chain, protocolVersion: connection.version, incompleteHandshake: nil)
        } catch let failure as BlockingTLSConnection.HandshakeFailure where !failure.chain.isEmpty {
            return Result(chain: failure.chain, protocolVersion: failure.protocolVersion, incompleteHandshake: failure.description)
        }
    }
}
