import Glibc
import FoundationEssentials
import PinproxyCore
import COpenSSL

extension TrustStore {
    /// The file OpenSSL reads the system's trust anchors from: `$SSL_CERT_FILE` when set,
    /// else OpenSSL's default bundle (e.g. /etc/ssl/certs/ca-certificates.crt on Debian).
    public static var systemBundlePath: String {
        let variable = String(cString: X509_get_default_cert_file_env())
        return ProcessInfo.processInfo.environment[variable] ?? String(cString: X509_get_default_cert_file())
    }
}

extension TrustStore {
    /// What the system trust store holds, for `pinproxy check`: where OpenSSL looks and how
    /// many certificates it finds there (0 when nothing is there at all).
    public struct SystemStoreContents: Sendable {
        /// The bundle file, or the directory read when there is no bundle file.
        public let location: String
        public let exists: Bool
        public let certificates: Int
    }

    /// The system store's bundle file (`systemBundlePath`) when it can be read, else OpenSSL's
    /// default directory (`$SSL_CERT_DIR` when set), and how many certificates it holds. Reads
    /// files: never on an event loop.
    public static func systemStoreContents() -> SystemStoreContents {
        let file = systemBundlePath
        if FileManager.default.isReadableFile(atPath: file) {
            let count = (try? FilePathBytes(file).read(.certificates)).flatMap { try? Certificate.parseAll($0).count } ?? 0
            return SystemStoreContents(location: file, exists: true, certificates: count)
        }
        let variable = String(cString: X509_get_default_cert_dir_env())
        let directory = ProcessInfo.processInfo.environment[variable] ?? String(cString: X509_get_default_cert_dir())
        // OpenSSL looks certificates up there by subject hash: HASH.0, HASH.1, ...
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        let hashed = names.filter { name in
            let parts = name.split(separator: ".")
            return parts.count == 2 && parts[0].count == 8 && parts[0].allSatisfy(\.isHexDigit) && parts[1].allSatisfy(\.isNumber)
        }
        var status = stat()
        let exists = stat(directory, &status) == 0 && status.st_mode & S_IFMT == S_IFDIR
        return SystemStoreContents(location: directory, exists: exists, certificates: hashed.count)
    }
}
