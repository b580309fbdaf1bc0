import Glibc
import COpenSSL
import CPinproxyShims
import PinproxyCore

/// Upstream TLS sessions kept for resumption, keyed by the caller (pinproxy keys them by
/// policy fingerprint, host and port). A session enters only through `admit`, i.e. after
/// its connection passed the verdict. Thread-safe; bounded.
public typealias TLSSessionCache = BoundedCache<StoredSession>

/// One SSL_SESSION, owned.
public final class StoredSession: @unchecked Sendable {
    let handle: OpaquePointer

    init(taking handle: OpaquePointer) {
        self.handle = handle
    }

    deinit {
        SSL_SESSION_free(handle)
    }
}

/// Ties one upstream SSL to its cache key until the connection is admitted; reached from
/// OpenSSL's new-session callback through the SSL's app data.
final class SessionSlot {
    let cache: TLSSessionCache
    let key: String
    var admitted = false

    init(cache: TLSSessionCache, key: String) {
        self.cache = cache
        self.key = key
    }

    /// Stores a copy of `session` if the connection has been admitted, and then frees
    /// `session` (ownership is taken when true is returned).
    ///
    /// A copy, because OpenSSL goes on changing the connection's own SSL_SESSION: when the
    /// server closes without a close_notify (OpenSSL 3 takes that for a fatal error), or when
    /// the SSL is freed without one sent, it marks that session not resumable. Shared with
    /// the cache, that voided the admitted session of every server that closes so (an
    /// HTTP/1.1 `Connection: close` answer, often), which was then never resumed. Since TLS
    /// 1.1 a missing close_notify does not forbid resumption, and every resumed connection
    /// is judged again (a refused one drops its session).
    func offer(_ session: OpaquePointer) -> Bool {
        guard admitted, SSL_SESSION_is_resumable(session) == 1, let copy = SSL_SESSION_dup(session) else { return false }
        SSL_SESSION_free(session)
        cache.store(StoredSession(taking: copy), for: key)
        return true
    }
}

/// OpenSSL's new-session callback: hands TLS 1.3 tickets that arrive after the handshake to
/// the connection's slot. Returning 1 means the slot took ownership of the session.
let newSessionCallback: @convention(c) (OpaquePointer?, OpaquePointer?) -> Int32 = { ssl, session in
    guard let ssl, let session, let data = pp_SSL_get_app_data(ssl) else { return 0 }
    let slot = Unmanaged<SessionSlot>.fromOpaque(data).takeUnretainedValue()
    return slot.offer(session) ? 1 : 0
}
