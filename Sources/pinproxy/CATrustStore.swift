import ArgumentParser
import Foundation
import PinproxyInterop

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
            printError("pinproxy ca --install: cannot write \(installedPath): \(error.localizedDescription) (run as root)")
            throw ExitCode(1)
        }
        try update([])
    }

    /// Removes `installedPath` (if there), then rebuilds the store with `update-ca-certificates --fresh`.
    static func uninstall() throws {
        if FileManager.default.fileExists(atPath: installedPath) {
            do {
                try FileManager.default.removeItem(atPath: installedPath)
            } catch {
                printError("pinproxy ca --uninstall: cannot remove \(installedPath): \(error.localizedDescription) (run as root)")
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
            printError("pinproxy ca: update-ca-certificates \(arguments.joined(separator: " ")) failed (exit \(result.status)): \(result.error.trimmingCharacters(in: .whitespacesAndNewlines))")
            throw ExitCode(1)
        }
    }
}
