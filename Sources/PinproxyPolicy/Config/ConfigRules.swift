import FoundationEssentials

/// The second stage of loading: the rules a decoded policy must follow, checked without
/// reading a file. Pure: a policy and a time in, findings out. A policy with an error here is
/// not built (and `HostPolicy` itself refuses the settings that fail open).
enum ConfigRules {
    /// Warnings look this far ahead.
    static let warningWindow: TimeInterval = 30 * 86_400

    /// Every rule `policy` breaks (errors, reported at the entry or the key concerned), and,
    /// when it breaks none, what is worth a warning at `now`.
    static func check(_ policy: RawPolicy, now: Date) -> [Finding] {
        let name = policy.name
        let path = policy.path
        var findings: [Finding] = []
        func error(_ keyPath: [String], _ message: String) { findings.append(.error(keyPath, message)) }

        if policy.pattern == nil && policy.includeSubdomains {
            error(path + ["include_subdomains"], "include_subdomains has no meaning in [default]")
        }
        if policy.includeSubdomains, let pattern = policy.pattern, !pattern.isExact {
            error(path + ["include_subdomains"], "\(name): include_subdomains applies to exact names only, not to \"*.\" patterns or IP literals")
        }
        if policy.pinKind == .none && policy.hasPinMaterial {
            let given = !policy.pins.isEmpty ? "pins" : "certificates"
            error(path, "\(name) gives \(given) but pin = \"none\": set pin = \"public-key\" or pin = \"certificate\" (or remove \(given))")
        }
        if policy.pinKind != .none && !policy.hasPinMaterial {
            error(path, "\(name) has pin = \"\(policy.pinKind.rawValue)\" but no pins and no certificates")
        }
        if policy.trust == .none && !policy.isPinned {
            error(path, "\(name) has trust = \"none\" without pins: it would accept any certificate; add pin and pins (or certificates)")
        }
        if !policy.validateHost && !policy.isPinned {
            error(path, "\(name) has validate_host = false without pins: it would accept a certificate for any name; add pin and pins (or certificates)")
        }
        if !policy.enforce && (policy.trust == .none || !policy.validateHost) {
            let key = policy.trust == .none ? "trust = \"none\"" : "validate_host = false"
            error(path, "\(name) has enforce = false with \(key): the pins are its only protection, and report-only would drop them; remove enforce = false (or verify the chain and the host)")
        }
        if policy.trust == .pinned && policy.certificateFiles.isEmpty {
            error(path, "\(name) has trust = \"pinned\" but no certificates: a hash alone cannot be an anchor; list the certificates")
        }
        if policy.expires != nil {
            if policy.pinKind == .none {
                error(path + ["expires"], "\(name): expires needs pins to expire")
            } else if !policy.trust.verifiesToAuthorities || !policy.validateHost {
                error(path + ["expires"], "\(name): expires is allowed only where the chain and the host are verified (trust = \"system\" or a list, validate_host = true): here the pins are the only protection")
            }
        }
        if policy.revocation == .crl && (policy.crlFiles ?? []).isEmpty {
            error(path, "\(name) has revocation = \"crl\" but no crls")
        }
        if policy.revocation != .crl && policy.crlFiles != nil {
            error(path + ["crls"], "\(name) gives crls but revocation is not \"crl\"")
        }
        if policy.trust == .none && policy.revocation != .off {
            error(path + ["revocation"], "\(name): revocation needs a verified chain, and trust = \"none\" verifies none")
        }
        if (policy.clientCertificateFile == nil) != (policy.clientKeyFile == nil) {
            let (given, missing) = policy.clientKeyFile == nil ? ("client_certificate", "client_key") : ("client_key", "client_certificate")
            error(path + [given], "\(name) gives \(given) without \(missing): both are needed to present a client certificate")
        }
        if policy.clientCertificateFile != nil && policy.mode != .tunnel {
            findings += clientCertificateErrors(policy)
        }
        if policy.mode == .tunnel {
            findings += tunnelErrors(policy)
        }
        guard findings.isEmpty else { return findings }

        if policy.action == .allowInsecure {
            findings.append(.warning(path + ["action"], "\(name) has action = \"allow-insecure\": its connections are not checked at all"))
        }
        if policy.mode == .tunnel, let pattern = policy.pattern {
            if !pattern.isExact || policy.includeSubdomains {
                let scope = policy.includeSubdomains ? "with include_subdomains" : "on the wildcard pattern \(pattern)"
                findings.append(.warning(path + ["mode"], "\(name) has mode = \"tunnel\" \(scope): EVERY name it matches is relayed unverified, to whichever address it resolves to, for any local process that asks; list the hosts that need a tunnel one by one instead"))
            } else {
                findings.append(.warning(path + ["mode"], "\(name) has mode = \"tunnel\": its TLS is relayed as it is, and nothing pinproxy checks (chain, host name, pins) applies to it"))
            }
        }
        if policy.clientCertificateFile != nil {
            findings.append(.warning(path + ["client_certificate"], "\(name) presents client_certificate to upstreams that ask for one: every local process that may reach \(name) through pinproxy connects as that identity (restrict who may with [clients])"))
        }
        if policy.ct != .off {
            switch policy.trust {
            case .system, .listed(_, includingSystem: true): break
            case .pinned, .none, .listed(_, includingSystem: false):
                findings.append(.warning(path + ["ct"], "\(name): ct has no effect: CT applies to chains that end at a system-store anchor, and this trust never reaches the system store"))
            }
        }
        if let (written, end) = policy.expires {
            if end <= now {
                findings.append(.warning(path + ["expires"], "\(name): expires = \(written) has passed: its pins are no longer enforced"))
            } else if end.timeIntervalSince(now) <= warningWindow {
                findings.append(.warning(path + ["expires"], "\(name): expires = \(written) is within 30 days: its pins stop being enforced then"))
            }
        }
        return findings
    }
}

extension ConfigRules {
    /// A tunnel verifies nothing: the keys that would have something verified, or that belong
    /// to pinproxy's own TLS, are errors on it (and `[default]` may not tunnel at all).
    static func tunnelErrors(_ policy: RawPolicy) -> [Finding] {
        let name = policy.name
        let path = policy.path
        guard policy.pattern != nil else {
            return [.error(path + ["mode"], "mode = \"tunnel\" is not allowed in [default]: it would relay every host unverified; give each host that needs a tunnel its own [hosts.\"NAME\"] entry")]
        }
        var keys: [(key: String, what: String)] = []
        if policy.action != .verify { keys.append(("action", "action = \"\(policy.action.rawValue)\"")) }
        if policy.pinKind != .none || policy.hasPinMaterial {
            keys.append((!policy.pins.isEmpty ? "pins" : !policy.certificateFiles.isEmpty ? "certificates" : "pin", "pins"))
        }
        if policy.revocation != .off { keys.append(("revocation", "revocation")) }
        if policy.verifyCommand != nil { keys.append(("verify_command", "verify_command")) }
        if !policy.enforce { keys.append(("enforce", "enforce = false")) }
        if policy.expires != nil { keys.append(("expires", "expires")) }
        if policy.clientCertificateFile != nil {
            keys.append(("client_certificate", "client_certificate (a tunnelled client presents its own)"))
        }
        return keys.map { key, what in
            .error(path + [key], "\(name) has mode = \"tunnel\", which relays the client's TLS unverified: \(what) cannot apply; remove it, or set mode = \"intercept\"")
        }
    }
}

extension ConfigRules {
    /// `client_certificate` goes only to a server the verdict passed, judged in the handshake
    /// before the certificate is sent: an entry that checks no server could never present it,
    /// and a `verify_command` could not answer in time.
    static func clientCertificateErrors(_ policy: RawPolicy) -> [Finding] {
        let name = policy.name
        let path = policy.path + ["client_certificate"]
        var findings: [Finding] = []
        if policy.action == .allowInsecure {
            findings.append(.error(path, "\(name) has client_certificate with action = \"allow-insecure\": the certificate goes only to a server that passed the verdict, and allow-insecure checks none; remove one of them"))
        }
        if policy.verifyCommand != nil {
            findings.append(.error(path, "\(name) has client_certificate with verify_command: the certificate is presented during the TLS handshake, once the server passed the verdict, and a verify_command cannot answer there; remove one of them"))
        }
        return findings
    }
}

extension HostPattern {
    /// Whether the pattern is an exact name (not `*.` and not an IP literal).
    var isExact: Bool {
        if case .exact = self { return true }
        return false
    }
}
