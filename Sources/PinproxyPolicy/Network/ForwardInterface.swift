/// A `capture.forward_interfaces` pattern: an interface name, or a prefix and a trailing `*`,
/// as nftables' `iifname` matches them.
public enum ForwardInterface {
    /// Why `pattern` cannot be one, or nil: a name is 1 to 15 bytes of printable ASCII without
    /// `/`, quotes, `\` or spaces, `*` only last; loopback never forwards anything, and
    /// capturing there would capture the lock's own redirected connections.
    public static func problem(_ pattern: String) -> String? {
        let name = pattern.hasSuffix("*") ? String(pattern.dropLast()) : pattern
        guard pattern.utf8.count <= 15, !(name.isEmpty && pattern != "*"),
              name.unicodeScalars.allSatisfy({ $0.isASCII && $0.value > 0x20 && $0.value < 0x7F && !"/\"\\\\*':".unicodeScalars.contains($0) })
        else {
            return "\"\(pattern)\" is not an interface name (at most 15 characters, no spaces, \"/\", quotes or \":\") or a prefix followed by \"*\""
        }
        if matches(pattern, "lo") {
            return "\"\(pattern)\" matches the loopback interface lo, which forwards nothing (this host's own traffic is captured in output)"
        }
        return nil
    }

    /// Whether `pattern` names the interface `name`.
    public static func matches(_ pattern: String, _ name: String) -> Bool {
        pattern.hasSuffix("*") ? name.hasPrefix(pattern.dropLast()) : pattern == name
    }
}
