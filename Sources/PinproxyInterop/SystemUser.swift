import Glibc

/// The user database, for messages that name a file's owner.
public enum SystemUser {
    /// The name of the user `uid` (through NSS: /etc/passwd, systemd's dynamic users while
    /// their unit runs); nil when it has none.
    public static func name(of uid: uid_t) -> String? {
        var entry = passwd()
        var found: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        // The entry's strings point into the buffer: read while it is borrowed.
        return buffer.withUnsafeMutableBufferPointer { bytes -> String? in
            guard let base = bytes.baseAddress, getpwuid_r(uid, &entry, base, bytes.count, &found) == 0, found != nil,
                  let name = entry.pw_name else { return nil }
            return String(cString: name)
        }
    }

    /// Whether `uid` lies where systemd allocates `DynamicUser=` uids (61184–65519).
    public static func isDynamicRange(_ uid: uid_t) -> Bool {
        (61_184...65_519).contains(uid)
    }
}
