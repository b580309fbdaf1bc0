import FoundationEssentials
import PinproxyInterop
import PinproxyPolicy

/// Whether this process, where it runs (its user, capabilities and sandbox), can identify
/// clients as a config's `[clients]` sections need; `check`, the daemon's start and each reload
/// ask, so that a sandbox that rules a lookup out is said, not found out by a rule that never
/// matches.
public enum ClientIdentityEnvironment {
    /// An error at the first `exe:` section when programs of other users cannot be read here
    /// (those sections would never match them, and would then not restrict them); a warning at
    /// the first section when client sockets cannot be looked up (every local client is then
    /// unknown, refused unless `[clients."unknown"]` admits it). None without `[clients]`.
    public static func problems(in config: Config) -> [Diagnostic] {
        guard let first = config.clients.sections.first else { return [] }
        var problems: [Diagnostic] = []
        if let why = SocketDiagnostics.selfTestProblem() {
            problems.append(Diagnostic(file: config.path, line: first.line, severity: .warning,
                                       message: "\(first.name): client sockets cannot be looked up here (\(why)), so every local client is unknown: a sandbox must allow AF_NETLINK (RestrictAddressFamilies=)"))
        }
        if let exe = config.clients.sections.first(where: { if case .exe = $0.selector { true } else { false } }),
           let why = ProcessExecutables.otherUsersProblem() {
            problems.append(Diagnostic(file: config.path, line: exe.line, severity: .error,
                                       message: "\(exe.name): exe: sections cannot identify other users' programs here: \(why); they would never match them (see docs/configuration.md, \"Policy per client\")"))
        }
        return problems
    }
}
