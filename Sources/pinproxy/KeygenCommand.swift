import ArgumentParser
import FoundationEssentials
import PinproxyInterop
import PinproxyPolicy

/// `pinproxy keygen`: a backup key for pinning, kept offline until the server moves to it.
struct KeygenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keygen",
        abstract: "Write a new ECDSA P-256 private key (mode 0600) and print its public-key pin.",
        discussion: """
            The backup-key practice (HPKP, TrustKit): list the pin of a key that no server uses yet next to \
            the live pins, keep the key offline, and issue the next certificate for it when the current key \
            must go. The file must not exist yet.
            """
    )

    @Argument(help: ArgumentHelp("Where to write the key (PKCS#8 PEM).", valueName: "FILE"))
    var file: String

    func run() throws {
        let key: PrivateKey
        do {
            key = try PrivateKey.generateP256()
            try key.writePEM(toNewFile: file)
        } catch {
            printError("pinproxy keygen: \(error)")
            throw ExitCode(1)
        }
        let pin = Pin(digest: SHA256.hash(key.subjectPublicKeyInfoDER))
        print("\(file): new private key (EC P-256), mode 0600; keep it offline")
        print("  public-key: \(pin)")
        print("")
        print("Add it to the host's pins as the backup:")
        print("  \"\(pin)\",  # backup key: \(file)")
    }
}
