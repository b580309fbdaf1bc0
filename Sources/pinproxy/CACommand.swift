import ArgumentParser
import Foundation
import PinproxyPolicy
import PinproxyProxy

/// `pinproxy ca`: the local CA that clients must trust, created if it does not exist yet.
struct CACommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ca",
        abstract: "Print the local CA certificate's path, then its PEM (creating the CA if needed).",
        discussion: "Clients trust it with e.g. curl --cacert PATH, REQUESTS_CA_BUNDLE, PIP_CERT, GIT_SSL_CAINFO, NODE_EXTRA_CA_CERTS, or update-ca-certificates."
    )

    @OptionGroup var options: ConfigOption

    func run() throws {
        let config = try options.loadOrExit()
        do {
            let ca = try LocalCA.openOrCreate(directory: config.proxy.caDirectory ?? LocalCA.defaultDirectory())
            print(ca.certificatePath)
            print(ca.certificate.pem, terminator: "")
            for warning in ca.warnings { printError("pinproxy: warning: \(warning)") }
        } catch {
            printError("pinproxy: cannot open or create the local CA: \(error)")
            throw ExitCode(1)
        }
    }
}
