import ArgumentParser
import FoundationEssentials
import PinproxyInterop
import PinproxyPolicy
import PinproxyProxy

/// `pin --connect` and `diagnose` talk to servers directly. Under the egress lock, a user who is
/// not exempt is sent to pinproxy's transparent listener instead, and gets a chain minted by the
/// local CA: printing its pins would be wrong, so the commands stop and say so.
enum CapturedChain {
    static let message = "captured by pinproxy: run as an exempt user"

    /// Where the local CA's certificate may be: the config's `ca_dir` (or the default one), and
    /// the copy `pinproxy ca --install` put in the system trust store.
    static func caCertificatePaths(config: Config?) -> [String] {
        let directory = config?.proxy.caDirectory ?? LocalCA.defaultDirectory()
        return [directory + "/" + LocalCA.certificateName, CATrustStore.installedPath]
    }

    /// Exits 1 when a certificate of `chain` was issued by the local CA (or is it).
    static func refuse(_ chain: [Certificate], target: String, config: Config?) throws {
        for path in caCertificatePaths(config: config) {
            guard let data = FileManager.default.contents(atPath: path),
                  let ca = try? Certificate.parseAll(Array(data)).first else { continue }
            if chain.contains(where: { $0 == ca || $0.isIssued(by: ca) }) {
                printError("\(target): \(message) (the chain was issued by pinproxy's local CA \(path): the egress lock sent this connection to pinproxy; [capture] exempt_users lists the users whose connections go out directly)")
                throw ExitCode(1)
            }
        }
    }
}
