import COpenSSL

/// OpenSSL's process-wide set-up, and each thread's share of it.
public enum OpenSSLLifetime {
    /// Initialises OpenSSL without its exit-time cleanup. Call it first thing in `main`, before
    /// anything else touches OpenSSL: the first initialisation decides.
    ///
    /// At exit OpenSSL would free its global state while threads that used it may still be
    /// ending (event loops just stopped, Dispatch's pool, the report sender), and their
    /// thread-exit destructors then read what was freed: a crash in `exit`. The process is ending
    /// anyway, so pinproxy keeps that state to the end.
    public static func initialize() {
        let options = UInt64(OPENSSL_INIT_NO_ATEXIT) | UInt64(OPENSSL_INIT_LOAD_SSL_STRINGS) | UInt64(OPENSSL_INIT_LOAD_CRYPTO_STRINGS)
        OPENSSL_init_ssl(options, nil)
    }

    /// Frees the calling thread's OpenSSL state (its error queue, random generators). A thread
    /// that used OpenSSL calls it as its last act; its thread-exit destructor then has nothing
    /// left to do.
    public static func endThread() {
        OPENSSL_thread_stop()
    }
}
