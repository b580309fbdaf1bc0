import Glibc
import PinproxyCore

/// User names and uids through the C library (NSS: /etc/passwd, and LDAP or sssd where
/// configured). A lookup can block on a remote directory: never call one on an event loop.
public enum UserDatabase {
    public typealias Answer<Value: Sendable> = UserLookupAnswer<Value>

    /// The name of user `uid`.
    public static func name(ofUID uid: UInt32) -> Answer<String> {
        lookUp({ entry, buffer, size, result in getpwuid_r(uid_t(uid), entry, buffer, size, result) }) { String(cString: $0.pw_name) }
    }

    /// The uid of user `name`; nil when there is no such user (or the database cannot say).
    public static func uid(of name: String) -> UInt32? {
        if case .found(let uid) = uid(ofUser: name) { return uid }
        return nil
    }

    /// The uid of the user called `name`.
    public static func uid(ofUser name: String) -> Answer<UInt32> {
        guard !name.isEmpty, !name.utf8.contains(0) else { return .missing }
        return lookUp({ entry, buffer, size, result in getpwnam_r(name, entry, buffer, size, result) }) { UInt32($0.pw_uid) }
    }

    /// A user's uid and primary gid.
    public struct IDs: Sendable, Equatable {
        public let uid: UInt32
        public let gid: UInt32
    }

    /// The uid and primary gid of the user called `name`.
    public static func ids(ofUser name: String) -> Answer<IDs> {
        guard !name.isEmpty, !name.utf8.contains(0) else { return .missing }
        return lookUp({ entry, buffer, size, result in getpwnam_r(name, entry, buffer, size, result) }) {
            IDs(uid: UInt32($0.pw_uid), gid: UInt32($0.pw_gid))
        }
    }

    /// Runs a `getpw*_r` call with a buffer that grows while it is too small, and reads the
    /// entry with `read` while the buffer its strings point into is alive.
    private static func lookUp<Value>(_ call: (UnsafeMutablePointer<passwd>, UnsafeMutablePointer<CChar>, Int,
                                               UnsafeMutablePointer<UnsafeMutablePointer<passwd>?>) -> Int32,
                                      _ read: (passwd) -> Value) -> Answer<Value> {
        var size = 1024
        while true {
            var entry = passwd()
            var result: UnsafeMutablePointer<passwd>?
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: size)
            defer { buffer.deallocate() }
            let code = call(&entry, buffer, size, &result)
            if code == ERANGE && size < 1 << 20 {
                size *= 4
                continue
            }
            if code != 0 { return .failed(code) }
            guard result != nil else { return .missing }
            return .found(read(entry))
        }
    }
}
