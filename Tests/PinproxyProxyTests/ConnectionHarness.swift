import Foundation
import PinproxyCore
import XCTest
@testable import PinproxyInterop
import PinproxyPolicy
import PinproxyService
@testable import PinproxyProxy

/// A `ClientConnection` on the embedded IO, and the ways to bring it into each of its states
/// the way a client and the network would.
final class ConnectionHarness {
    /// The e2e tests' PKI (`Tests/e2e/pki.py`) in a temporary directory, and the chain the
    /// embedded upstreams present: api.test's, which verifies, so that its `verify_command` runs.
    static let pki: (directory: String, chain: [Certificate]) = {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let directory = NSTemporaryDirectory() + "pinproxy-transitions-pki-\(getpid())"
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", root.appendingPathComponent("Tests/e2e/pki.py").path, directory]
        process.standardOutput = FileHandle.nullDevice
        guard (try? process.run()) != nil else { preconditionFailure("Tests/e2e/pki.py cannot be run") }
        process.waitUntilExit()
        guard process.terminationStatus == 0, let bytes = FileManager.default.contents(atPath: directory + "/api-chain.pem"),
              let chain = try? Certificate.parseAll(Array(bytes)) else { preconditionFailure("Tests/e2e/pki.py made no api.test chain") }
        return (directory, chain)
    }()

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

    /// One shared state for every test: the CA is made once, in a temporary directory.
    static let shared: SharedState = {
        let directory = NSTemporaryDirectory() + "pinproxy-transitions-\(getpid())"
        // A failure here fails every test that uses the harness, with this message.
        guard let config = try? config(), let ca = try? LocalCA.openOrCreate(directory: directory),
              let shared = try? SharedState(policy: PolicyState(config), localCA: ca, log: AccessLog(format: .logfmt),
                                            metrics: ProxyMetrics(version: "test", commit: "test"), openFileLimit: 1024, adminConnections: 0)
        else { preconditionFailure("the transition tests' shared state cannot be made") }
        return shared
    }()

    let io = EmbeddedIO()
    let plainClient = EmbeddedEndpoint(socket: 10)
    let connection: ClientConnection<EmbeddedIO>
    private let closeCount = Counter()

    private final class Counter {
        var value = 0
    }

    init(config: Config, listener: ListenerKind = .connect) {
        io.presentedChain = Self.pki.chain
        let loopback = IPAddress("127.0.0.1")!
        connection = ClientConnection(io: io, shared: Self.shared, clientSide: plainClient, client: SocketAddress(address: loopback, port: 40000),
                                      ourEnd: SocketAddress(address: loopback, port: 3128), config: config,
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
