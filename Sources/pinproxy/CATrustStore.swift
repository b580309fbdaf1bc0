import ArgumentParser
import FoundationEssentials
import PinproxyInterop
import PinproxyCore

/// The system trust store, as Debian's `update-ca-certificates` keeps it: `pinproxy ca --install`
/// puts the local CA there, so that clients which use the system store (curl, wget, git,
/// Python's ssl, Go, OpenSSL-based programs) trust it with nothing more.
enum CATrustStore {
    static let directory = "/usr/local/share/ca-certificates"
    static let installedPath = directory + "/pinproxy.crt"

    /// Copies `ca` to `installedPath` (replaced atomically), then runs `update-ca-certificates`.
    static func install(_ ca: Certificate) throws {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o755])
            try Data(ca.pem.utf8).write(to: URL(fileURLWithPath: installedPath), options: .atomic)
            try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: installedPath)
        } catch {
            printError("pinproxy ca --install: cannot write \(installedPath): \(systemMessage(of: error)) (run as root)")
            throw ExitCode(1)
        }
        try update([])
    }

    /// What `ca --install` prints last: the clients that do not read the system store, and how
    /// to give each of them the CA host-wide (`bundle`: the system bundle, which now holds it).
    static func otherClients(bundle: String) -> [String] {
        ["curl, wget, git, Python's ssl, Go and other OpenSSL-based clients read the system store: they need nothing more.",
         "Clients with a store of their own need it host-wide, e.g. in /etc/environment (read at the next login):",
         "  Node.js:  NODE_EXTRA_CA_CERTS=\(installedPath)",
         "  Python with certifi (requests, pip, httpx from PyPI):  REQUESTS_CA_BUNDLE=\(bundle)  PIP_CERT=\(bundle)  SSL_CERT_FILE=\(bundle)",
         "  Java:  Debian's ca-certificates-java adds it to /etc/ssl/certs/java/cacerts by itself; a JDK of its own needs",
         "         keytool -importcert -cacerts -noprompt -alias pinproxy -file \(installedPath)",
         "Services started by systemd do not read /etc/environment: give them Environment= lines (systemctl edit SERVICE)."]
    }

    /// Removes `installedPath` (if there), then rebuilds the store with `update-ca-certificates --fresh`.
    static func uninstall() throws {
        if FileManager.default.fileExists(atPath: installedPath) {
            do {
                try FileManager.default.removeItem(atPath: installedPath)
            } catch {
                printError("pinproxy ca --uninstall: cannot remove \(installedPath): \(systemMessage(of: error)) (run as root)")
                throw ExitCode(1)
            }
        }
        try update(["--fresh"])
    }

    private static func update(_ arguments: [String]) throws {
        guard let tool = findExecutable("update-ca-certificates") else {
            printError("pinproxy ca: update-ca-certificates is not installed (apt-get install ca-certificates)")
            throw ExitCode(1)
        }
        let result = try runChild(tool, arguments, input: "")
        guard result.status == 0 else {
            printError("pinproxy ca: update-ca-certificates \(arguments.joined(separator: " ")) failed (exit \(result.status)): \(result.error.trimmingWhitespace())")
            throw ExitCode(1)
        }
    }
}
