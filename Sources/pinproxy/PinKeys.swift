import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy

extension PinCommand {
    /// Prints the public-key pin of a key file: a public key (SPKI, PEM or DER) or a private key,
    /// whose private part is never printed. False when the file holds no key either.
    static func printKeyPin(file: String, bytes: [UInt8]) -> Bool {
        guard let key = try? KeyFileContents.parse(bytes) else { return false }
        print("\(file): \(key.wasPrivate ? "private key" : "public key") (\(key.algorithm))" +
              (key.wasPrivate ? "; only its public key's pin is printed" : ""))
        print("  public-key: \(Pin(digest: key.publicKeySHA256))")
        print("")
        return true
    }

    /// Why a file is neither a certificate nor a key, in the words of the key parser (which
    /// names an encrypted private key).
    static func keyProblem(_ bytes: [UInt8]) -> String? {
        do {
            _ = try KeyFileContents.parse(bytes)
            return nil
        } catch {
            return "\(error)"
        }
    }
}
