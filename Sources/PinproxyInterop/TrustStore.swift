import Glibc
import Foundation
import COpenSSL
import CPinproxyShims

/// A set of trust anchors: owns one OpenSSL `X509_STORE`. Immutable once built, so
/// verifications on any thread may share it.
public final class TrustStore: @unchecked Sendable {
    let handle: OpaquePointer
    /// Whether certificates in the store end a path even when not self-signed.
    public let acceptsPartialChains: Bool

    private init(handle: OpaquePointer, acceptsPartialChains: Bool) {
        self.handle = handle
        self.acceptsPartialChains = acceptsPartialChains
    }

    deinit {
        X509_STORE_free(handle)
    }

    /// The operating system's trust store: OpenSSL's default bundle file (or `$SSL_CERT_FILE`),
    /// read whole now, so that verification never touches the disk. Only where no bundle file
    /// exists does it fall back to OpenSSL's default paths (a hashed directory, read lazily).
    /// Call it at start-up or reload, never on the event loop.
    public static func system() throws -> TrustStore {
        guard let store = X509_STORE_new() else { throw OpenSSLError.drain("X509_STORE_new") }
        let variable = String(cString: X509_get_default_cert_file_env())
        let file = ProcessInfo.processInfo.environment[variable] ?? String(cString: X509_get_default_cert_file())
        var info = stat()
        if stat(file, &info) == 0 && Int64(info.st_size) > Int64(FilePathBytes.readLimit) {
            X509_STORE_free(store)
            throw OpenSSLError(operation: "the system trust store \(file) \(FileReadError.tooLarge(limit: FilePathBytes.readLimit))", messages: [])
        }
        let loaded = FileManager.default.isReadableFile(atPath: file) ? X509_STORE_load_file(store, file) : X509_STORE_set_default_paths(store)
        guard loaded == 1 else {
            X509_STORE_free(store)
            throw OpenSSLError.drain("loading the system trust store")
        }
        return TrustStore(handle: store, acceptsPartialChains: false)
    }

    /// A store whose only anchors are `anchors`; each of them ends a path, self-signed or not.
    public init(anchors: [Certificate]) throws {
        guard let store = X509_STORE_new() else { throw OpenSSLError.drain("X509_STORE_new") }
        for anchor in anchors where X509_STORE_add_cert(store, anchor.handle) != 1 {
            // A duplicate anchor is not an error; anything else is.
            let messages = drainErrorQueue()
            if !messages.allSatisfy({ $0.contains("cert already in hash table") }) {
                X509_STORE_free(store)
                throw OpenSSLError(operation: "adding an anchor", messages: messages)
            }
        }
        self.handle = store
        self.acceptsPartialChains = true
    }
}
