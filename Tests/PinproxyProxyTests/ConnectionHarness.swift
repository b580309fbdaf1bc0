import Foundation
import PinproxyCore
import XCTest
import PinproxyInterop
import PinproxyPolicy
@testable import PinproxyProxy
import PinproxyService

/// A `ClientConnection` on the embedded IO, and the ways to bring it into each of its states
/// the way a client and the network would.
final class ConnectionHarness {
    /// A root made in the process for the tests: its certificate is written to a temporary
    /// directory (the `root-a.pem` the config trusts), nothing else is on disk. Like the local
    /// CA's, it carries an extendedKeyUsage, so the entries that trust it leave the web-PKI
    /// profile out (`require_web_pki_profile = false`).
    static let pki: (directory: String, root: Certificate, key: PrivateKey) = {
        let directory = NSTemporaryDirectory() + "pinproxy-transitions-\(getpid())"
        guard (try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)) != nil,
              let key = try? PrivateKey.generateP256(),
              let root = try? CertificateBuilder.makeCA(commonName: "pinproxy transition tests", key: key, notBefore: Date() - 3_600,
                                                         notAfter: Date() + 86_400),
              FileManager.default.createFile(atPath: directory + "/root-a.pem", contents: Data(root.pem.utf8))
        else { preconditionFailure("the transition tests' root cannot be made") }
        return (directory, root, key)
    }()

    /// A chain for `host` (leaf, root) under `pki`'s root, and the leaf's key.
    static func chain(for host: String) -> (chain: [Certificate], key: PrivateKey) {
        guard let key = try? PrivateKey.generateP256(),
              let leaf = try? CertificateBuilder.makeLeaf(for: .dns(host), key: key, issuer: pki.root, issuerKey: pki.key,
                                                          notBefore: Date() - 3_600, notAfter: Date() + 86_400)
        else { preconditionFailure("no leaf for \(host)") }
        return ([leaf, pki.root], key)
    }

    /// What the embedded upstreams present: api.test's chain, which verifies, so that its
    /// `verify_command` runs.
    static let apiChain = chain(for: "api.test").chain

    static let configText = """
        [proxy]
        block_private_destinations = false

        [resolve]
        "tunnel.test" = "192.0.2.1"
        "bound-insecure.test" = "198.51.100.7"

        [hosts."insecure.test"]
        action = "allow-insecure"

        [hosts."bound-insecure.test"]
        action = "allow-insecure"

        [hosts."api.test"]
        trust = ["root-a.pem"]
        require_web_pki_profile = false
        verify_command = ["/bin/true"]

        [hosts."denied.test"]
        action = "deny"

        [hosts."tunnel.test"]
        mode = "tunnel"

        [hosts."dns-tunnel.test"]
        mode = "tunnel"

        """

    static func config(_ extra: String = "", proxy: String = "") throws -> Config {
        let text = configText.replacingOccurrences(of: "[proxy]\n", with: "[proxy]\n\(proxy)\n") + extra
        return try ConfigLoader.load(text: text, path: "transitions.toml", directory: pki.directory)
    }

    /// What the kernel says of a transparent connection that was not redirected: no original destination.
    static let notRedirected = ConnectionAddresses(local: nil, original: .failure(SystemError("getsockopt(SO_ORIGINAL_DST)", ENOENT)))

    let io = EmbeddedIO()
    let plainClient = EmbeddedEndpoint(socket: 10)
    let connection: ClientConnection<EmbeddedIO>
    private let closeCount = Counter()

    private final class Counter {
        var value = 0
    }

    init(config: Config, listener: ListenerKind = .connect) {
        io.presentedChain = Self.apiChain
        let loopback = IPAddress("127.0.0.1")!
        connection = ClientConnection(io: io, clientSide: plainClient, client: SocketAddress(address: loopback, port: 40000),
                                      ourEnd: SocketAddress(address: loopback, port: 3128), config: ConfigSnapshot(config),
                                      listener: listener) { [closeCount] _ in closeCount.value += 1 }
    }

    /// How many times the connection told its owner it closed.
    var closes: Int { closeCount.value }
    var state: String { connection.state.name }
    /// The client's socket as the connection sees it now (its TLS once accepted).
    var client: EmbeddedEndpoint { connection.clientSide }
    var upstream: EmbeddedEndpoint? { io.upstreams.last }
    /// The timers of the current state.
    var timers: [EmbeddedTimer] { io.liveTimers }
}
