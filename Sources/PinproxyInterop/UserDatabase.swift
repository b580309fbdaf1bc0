import Glibc

/// The system's user database (NSS: /etc/passwd and whatever else it is configured with).
public enum UserDatabase {
    /// The uid of user `name`; nil when there is no such user.
    public static func uid(of name: String) -> UInt32? {
        var entry = passwd()
        var found: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16 * 1024)
        let status = getpwnam_r(name, &entry, &buffer, buffer.count, &found)
        guard status == 0, found != nil else { return nil }
        return entry.pw_uid
    }
}
