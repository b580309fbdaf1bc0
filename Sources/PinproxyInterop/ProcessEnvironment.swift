import Glibc

/// This process's environment and the C library's words for its errors.
public enum ProcessEnvironment {
    /// Removes `name` from the environment, so that no child inherits it.
    public static func unset(_ name: String) {
        unsetenv(name)
    }

    /// The C library's text for an `errno` value (`strerror`).
    public static func errorText(_ code: Int32) -> String {
        String(cString: strerror(code))
    }
}
