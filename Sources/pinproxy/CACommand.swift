import ArgumentParser
import FoundationEssentials
import PinproxyInterop
import PinproxyPolicy
import PinproxyProxy

/// `pinproxy ca`: the local CA that clients must trust, created if it does not exist yet.
struct CACommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ca",
        abstract: "Print the local CA certificate's path, then its PEM (creating the CA if needed).",
        discussion: """
            Clients trust it with e.g. curl --cacert PATH, REQUESTS_CA_BUNDLE, PIP_CERT, GIT_SSL_CAINFO, NODE_EXTRA_CA_CERTS, \
            or update-ca-certificates. Clients whose variable replaces their whole trust store (REQUESTS_CA_BUNDLE, PIP_CERT, \
            SSL_CERT_FILE) should get --bundle FILE instead: the system bundle plus the pinproxy CA, so that hosts they reach \
            without the proxy (NO_PROXY) still verify. --install adds the CA to the system trust store \
            (/usr/local/share/ca-certificates/pinproxy.crt, then update-ca-certificates); --uninstall removes it.
            """
    )

    @OptionGroup var options: ConfigOption

    @Option(name: .long, help: ArgumentHelp("Write the system trust bundle plus the pinproxy CA to FILE (replaced atomically), then print FILE; \"-\" prints the bundle.", valueName: "FILE"))
    var bundle: String?

    @Flag(name: .long, help: "Add the CA to the system trust store (/usr/local/share/ca-certificates/pinproxy.crt, then update-ca-certificates).")
    var install = false

    @Flag(name: .long, help: "Remove the CA from the system trust store (then update-ca-certificates --fresh).")
    var uninstall = false

    func validate() throws {
        if [install, uninstall, bundle != nil].filter({ $0 }).count > 1 {
            throw ValidationError("give at most one of --install, --uninstall and --bundle")
        }
    }

    func run() throws {
        if uninstall {
            try CATrustStore.uninstall()
            return print("removed \(CATrustStore.installedPath) from the system trust store")
        }
        let config = try options.loadOrExit()
        do {
            // An existing CA's certificate is read as it is; only creating the CA opens the directory and key.
            let directory = config.proxy.caDirectory ?? LocalCA.defaultDirectory()
            let ca = try LocalCA.readCertificate(directory: directory) ?? {
                let created = try LocalCA.openOrCreate(directory: directory)
                return (created.certificatePath, created.certificate, created.warnings)
            }()
            if install {
                try CATrustStore.install(ca.certificate)
                print("\(CATrustStore.installedPath): the system trust store now trusts \(ca.certificate.subject)")
                for line in CATrustStore.otherClients(bundle: TrustStore.systemBundlePath) { print(line) }
                return
            }
            if let bundle { return try writeBundle(to: bundle, ca: ca.certificate) }
            print(ca.path)
            print(ca.certificate.pem, terminator: "")
            for warning in ca.warnings { printError("pinproxy: warning: \(warning)") }
        } catch let exit as ExitCode {
            throw exit
        } catch {
            printError("pinproxy: cannot open or create the local CA: \(error)")
            throw ExitCode(1)
        }
    }

    /// The system bundle, then the pinproxy CA (unless the bundle holds it already), to `path`
    /// through a temporary file renamed into place, or to stdout for "-".
    func writeBundle(to path: String, ca: Certificate) throws {
        let systemPath = TrustStore.systemBundlePath
        guard let system = FileManager.default.contents(atPath: systemPath) else {
            printError("pinproxy ca --bundle: cannot read the system trust bundle \(systemPath) (set SSL_CERT_FILE to the bundle to start from)")
            throw ExitCode(1)
        }
        var text = String(decoding: system, as: UTF8.self)
        if !text.contains(ca.pem) {
            if !text.isEmpty && !text.hasSuffix("\n") { text += "\n" }
            text += "# pinproxy local CA: \(ca.subject)\n" + ca.pem
        }
        if path == "-" {
            print(text, terminator: "")
            return
        }
        do {
            try Data(text.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            printError("pinproxy ca --bundle: cannot write \(path): \(systemMessage(of: error))")
            throw ExitCode(1)
        }
        print(path)
    }
}
