import Glibc
import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy

/// The local interception CA: an ECDSA P-256 key and self-signed certificate kept in
/// `ca_dir` (directory 0700, key 0600), created on first start and stable across restarts.
/// It mints one leaf per CONNECT host, each with a key of its own, and caches them, within
/// `cacheLimit` leaves and `cacheByteLimit` bytes (least recently used first out).
public final class LocalCA: Sendable {
    /// The CA certificate file clients are told to trust.
    public let certificatePath: String
    /// The CA certificate.
    public let certificate: Certificate
    /// What the operator should know about this CA (one opened without a serverAuth EKU).
    public let warnings: [String]
    private let key: PrivateKey
    private let minted: Locked<MintedLeafCache>

    /// A minted leaf and its key.
    public struct MintedLeaf: Sendable {
        public let certificate: Certificate
        public let key: PrivateKey
    }

    /// How long a minted leaf is valid; it is minted again when less than a day is left.
    static let leafLifetime: TimeInterval = 30 * 86_400
    /// Minted leaves kept at most, and the bytes they may take (certificate DER and key PEM:
    /// 690 bytes for a 6-character name, 920 bytes for a 248-character one).
    static let cacheLimit = 10_000
    static let cacheByteLimit = 8 << 20

    public static let certificateName = "ca.pem"
    static let keyName = "ca.key"

    /// Below this uid, a user is a system user (Debian's `SYS_UID_MAX` is 999).
    static let firstRegularUID: uid_t = 1000

    /// The CA directory when the config sets none: `$STATE_DIRECTORY` under systemd, else
    /// /var/lib/pinproxy for root and system users, else `$XDG_STATE_HOME/pinproxy` or
    /// ~/.local/state/pinproxy.
    public static func defaultDirectory(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let state = environment["STATE_DIRECTORY"], !state.isEmpty {
            // systemd may pass several, separated by colons; the first is pinproxy's.
            return String(state.split(separator: ":").first ?? Substring(state))
        }
        // Root and system users (the service's user `pinproxy`) keep it where systemd's
        // StateDirectory= would, whatever HOME they inherited (`sudo -u`, setpriv, su keep root's).
        if CurrentProcess.userID < firstRegularUID { return "/var/lib/pinproxy" }
        if let xdg = environment["XDG_STATE_HOME"], xdg.hasPrefix("/") { return xdg + "/pinproxy" }
        return (environment["HOME"] ?? FileManager.default.homeDirectoryForCurrentUser.path) + "/.local/state/pinproxy"
    }

    /// Opens the CA in `directory`, creating the directory, key and certificate if absent.
    /// Refuses a directory owned by another user and a key that others may read or that
    /// another user owns: whoever can read the key can impersonate every host to clients.
    public static func openOrCreate(directory: String) throws -> LocalCA {
        let manager = FileManager.default
        let certificatePath = directory + "/" + certificateName
        let keyPath = directory + "/" + keyName
        try prepareDirectory(directory)
        if manager.fileExists(atPath: keyPath) || manager.fileExists(atPath: certificatePath) {
            try checkKeyFile(keyPath)
            guard let keyData = manager.contents(atPath: keyPath), let certificateData = manager.contents(atPath: certificatePath) else {
                throw LocalCAError("the CA in \(directory) is incomplete or unreadable: \(keyName) and \(certificateName) must both be readable")
            }
            let key = try PrivateKey(pem: Array(keyData))
            guard let certificate = try Certificate.parseAll(Array(certificateData)).first, key.matches(certificate) else {
                throw LocalCAError("\(certificatePath) does not match \(keyPath)")
            }
            return LocalCA(certificatePath: certificatePath, certificate: certificate, key: key,
                           warnings: warnings(certificate, path: certificatePath, directory: directory))
        }
        let key = try PrivateKey.generateP256()
        let now = Date()
        let host = ProcessInfo.processInfo.hostName
        let certificate = try CertificateBuilder.makeCA(commonName: "pinproxy local CA (\(host))", key: key,
                                                        notBefore: now.addingTimeInterval(-3_600),
                                                        notAfter: now.addingTimeInterval(10 * 365 * 86_400))
        // Written under temporary names inside the 0700 directory, then renamed into place.
        try write(key.pem, to: keyPath, permissions: 0o600)
        try write(certificate.pem, to: certificatePath, permissions: 0o644)
        return LocalCA(certificatePath: certificatePath, certificate: certificate, key: key, warnings: [])
    }

    /// The CA certificate in `directory`, read as any user who may read it: neither the
    /// directory nor the key need be its (only opening the key does). Nil when there is none yet.
    public static func readCertificate(directory: String) throws -> (path: String, certificate: Certificate, warnings: [String])? {
        let path = directory + "/" + certificateName
        let bytes: [UInt8]
        do {
            bytes = try FilePathBytes(path).read(.certificates)
        } catch .tooLarge(let kind) {
            throw LocalCAError("\(path) is larger than \(kind.readLimit) bytes: not a CA certificate")
        } catch {
            return nil  // none yet, or not this user's to read: opening the CA says why
        }
        guard let certificate = try Certificate.parseAll(bytes).first else { throw LocalCAError("\(path) holds no certificate") }
        return (path, certificate, warnings(certificate, path: path, directory: directory))
    }

    /// What the operator should know about the CA certificate at `path`.
    private static func warnings(_ certificate: Certificate, path: String, directory: String) -> [String] {
        guard certificate.extendedKeyUsage?.contains(.serverAuth) != true else { return [] }
        // Made by pinproxy before 2026-11, or brought in: kept, since every client trusts it.
        return ["the local CA \(path) has no extendedKeyUsage serverAuth, so a stolen CA key could also sign code-signing or e-mail certificates: to get a CA limited to TLS servers, stop pinproxy, delete \(certificateName) and \(keyName) in \(directory), start it again, and have every client trust the new CA"]
    }

    /// Creates `directory` (0700) if absent; an existing one must belong to the daemon's user,
    /// and is then made 0700.
    private static func prepareDirectory(_ directory: String) throws {
        let path = FilePathBytes(directory)
        let info: FileStatus
        do {
            info = try path.status()
        } catch where error.isNotFound {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            do {
                info = try path.status()
            } catch {
                throw LocalCAError("cannot use ca_dir \(directory): \(error.reason)")
            }
        } catch {
            throw LocalCAError("cannot use ca_dir \(directory): \(error.reason)")
        }
        guard info.isDirectory else { throw LocalCAError("ca_dir \(directory) is not a directory") }
        let user = CurrentProcess.effectiveUserID
        guard info.owner == user else { throw ownerError(directory, owner: info.owner, user: user) }
        if info.permissions & 0o077 != 0 {
            do {
                try path.setPermissions(0o700)
            } catch {
                throw LocalCAError("cannot make ca_dir \(directory) mode 0700: \(error.reason)")
            }
        }
    }

    /// The service's user: the shipped unit's `User=` (and the name systemd gives its `DynamicUser`).
    static let serviceUser = "pinproxy"

    /// Why `directory`, owned by `owner`, is not this process's to use, and what to do. A
    /// directory of the service's user holds the service's CA: the service creates it at
    /// start, and then anyone may read its certificate; its ownership must not change.
    static func ownerError(_ directory: String, owner: uid_t, user: uid_t) -> LocalCAError {
        let name = SystemUser.name(of: owner)
        let whose = name.map { "uid \(owner) (\($0))" } ?? "uid \(owner)"
        if name == serviceUser || (name == nil && SystemUser.isDynamicRange(owner)) {
            let service = name == nil ? "a systemd DynamicUser (the pinproxy service's, under a unit with DynamicUser=yes)" : "the user the pinproxy service runs as"
            return LocalCAError("ca_dir \(directory) belongs to \(whose), \(service), not to uid \(user) that this pinproxy runs as: it holds the service's CA, which only the service may create or open. Start the service once (`systemctl start pinproxy`) so that it creates the CA; `pinproxy ca` then reads its certificate as any user. Do not chown it: the service would then refuse it")
        }
        return LocalCAError("ca_dir \(directory) belongs to \(whose), not to uid \(user) that pinproxy runs as: its owner could read or replace the CA key. Run `chown -R \(user) \(directory)` if that owner is trusted, or set ca_dir to a new directory (pinproxy creates it)")
    }

    /// The key must belong to the daemon's user, and nobody else may read or write it.
    private static func checkKeyFile(_ path: String) throws {
        guard let info = try? FilePathBytes(path).status() else { return }  // a missing key is reported with the certificate
        let user = CurrentProcess.effectiveUserID
        guard info.owner == user else {
            throw LocalCAError("\(path) belongs to uid \(info.owner), not to uid \(user) that pinproxy runs as: pinproxy did not create it. Delete \(keyName) and \(certificateName) so that pinproxy makes a new CA (clients must then trust the new one), or `chown \(user) \(path)` if you made it yourself")
        }
        let mode = info.permissions
        guard mode & 0o077 == 0 else {
            throw LocalCAError("\(path) has mode \(String(mode, radix: 8)): others can read or change the CA key, and anyone who read it can impersonate every host to clients that trust this CA. If nobody else copied it, run `chmod 600 \(path)`; otherwise delete \(keyName) and \(certificateName) so that pinproxy makes a new CA, and have every client trust the new one")
        }
    }

    private static func write(_ text: String, to path: String, permissions: Int) throws {
        let temporary = path + ".tmp-\(ProcessInfo.processInfo.processIdentifier)"
        guard FileManager.default.createFile(atPath: temporary, contents: Data(text.utf8), attributes: [.posixPermissions: permissions]) else {
            throw LocalCAError("cannot write \(temporary)")
        }
        try FileManager.default.setAttributes([.posixPermissions: permissions], ofItemAtPath: temporary)
        try FileManager.default.moveItem(atPath: temporary, toPath: path)
    }

    private init(certificatePath: String, certificate: Certificate, key: PrivateKey, warnings: [String]) {
        minted = Locked(MintedLeafCache(maximumCount: Self.cacheLimit, maximumBytes: Self.cacheByteLimit))
        self.certificatePath = certificatePath
        self.certificate = certificate
        self.key = key
        self.warnings = warnings
    }

    /// The cached leaf for `host`, minted now if absent or about to expire (`onMint` is then
    /// called, for the metrics).
    public func leaf(for host: TargetHost, now: Date = Date(), onMint: () -> Void = {}) throws -> MintedLeaf {
        if let cached = minted.withLock({ $0.leaf(for: host) }), cached.certificate.notAfter.timeIntervalSince(now) > 86_400 {
            return cached
        }
        let key = try PrivateKey.generateP256()
        let name: CertificateBuilder.SubjectName = switch host {
        case .name(let dns): .dns(dns)
        case .ip(let address): .ip(address)
        }
        let notAfter = min(now.addingTimeInterval(Self.leafLifetime), certificate.notAfter)
        let leaf = MintedLeaf(certificate: try CertificateBuilder.makeLeaf(for: name, key: key, issuer: certificate, issuerKey: self.key,
                                                                            notBefore: now.addingTimeInterval(-3_600), notAfter: notAfter),
                              key: key)
        let bytes = leaf.certificate.der.count + key.pem.utf8.count
        minted.withLock { $0.insert(leaf, bytes: bytes, for: host) }
        onMint()
        return leaf
    }
}

/// A local CA that cannot be opened or created.
public struct LocalCAError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
