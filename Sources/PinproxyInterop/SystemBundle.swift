import Glibc
import Foundation
import COpenSSL

extension TrustStore {
    /// The file OpenSSL reads the system's trust anchors from: `$SSL_CERT_FILE` when set,
    /// else OpenSSL's default bundle (e.g. /etc/ssl/certs/ca-certificates.crt on Debian).
    public static var systemBundlePath: String {
        let variable = String(cString: X509_get_default_cert_file_env())
        return ProcessInfo.processInfo.environment[variable] ?? String(cString: X509_get_default_cert_file())
    }
}
