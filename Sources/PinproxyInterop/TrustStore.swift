import Glibc
import FoundationEssentials
import COpenSSL
import CPinproxyShims
import PinproxyCore

/// A set of trust anchors: owns one OpenSSL `X509_STORE`. Immutable once built, so
/// verifications on any thread may share it.
public final class TrustStore: @unchecked Sendable {
    let handle: OpaquePointer
    /// Whether certificates in the store end a path even when not self-signed.
    public let acceptsPartialChains: Bool

    /// Whether the store also looks anchors up in OpenSSL's default directory, on demand.
    private let readsDefaultPaths: Bool

    private init(handle: OpaquePointer, acceptsPartialChains: Bool, readsDefaultPaths: Bool = false) {
        self.handle = handle
        self.acceptsPartialChains = acceptsPartialChains
        self.readsDefaultPaths = readsDefaultPaths
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
        if stat(file, &info) == 0 && Int64(info.st_size) > Int64(FileKind.certificates.readLimit) {
            X509_STORE_free(store)
            throw OpenSSLError(operation: "the system trust store \(file) \(FileReadError.tooLarge(.certificates))", messages: [])
        }
        let fromFile = FileManager.default.isReadableFile(atPath: file)
        let loaded = fromFile ? X509_STORE_load_file(store, file) : X509_STORE_set_default_paths(store)
        guard loaded == 1 else {
            X509_STORE_free(store)
            throw OpenSSLError.drain("loading the system trust store")
        }
        return TrustStore(handle: store, acceptsPartialChains: false, readsDefaultPaths: !fromFile)
    }

    /// A new store with every anchor of this one plus `anchors` (`trust = ["system", FILE]`).
    /// As in a store of listed anchors, each of them ends a path, self-signed or not.
    public func adding(_ anchors: [Certificate]) throws -> TrustStore {
        guard let store = X509_STORE_new() else { throw OpenSSLError.drain("X509_STORE_new") }
        let combined = TrustStore(handle: store, acceptsPartialChains: true, readsDefaultPaths: readsDefaultPaths)
        if readsDefaultPaths && X509_STORE_set_default_paths(store) != 1 {
            throw OpenSSLError.drain("loading the system trust store")
        }
        guard let existing = X509_STORE_get1_all_certs(handle) else { throw OpenSSLError.drain("reading the system trust store") }
        defer { pp_sk_X509_pop_free(existing) }
        var certificates: [OpaquePointer] = []
        for index in 0..<pp_sk_X509_num(existing) {
            if let certificate = pp_sk_X509_value(existing, index) { certificates.append(certificate) }
        }
        try combined.add(certificates + anchors.map(\.handle))
        return combined
    }

    /// A store whose only anchors are `anchors`; each of them ends a path, self-signed or not.
    public convenience init(anchors: [Certificate]) throws {
        guard let store = X509_STORE_new() else { throw OpenSSLError.drain("X509_STORE_new") }
        self.init(handle: store, acceptsPartialChains: true)
        try add(anchors.map(\.handle))
    }

    /// Adds each certificate (the store takes its own reference).
    private func add(_ certificates: [OpaquePointer]) throws {
        for certificate in certificates where X509_STORE_add_cert(handle, certificate) != 1 {
            // A duplicate anchor is not an error; anything else is.
            let messages = drainErrorQueue()
            if !messages.allSatisfy({ $0.contains("cert already in hash table") }) {
                throw OpenSSLError(operation: "adding an anchor", messages: messages)
            }
        }
    }
}
