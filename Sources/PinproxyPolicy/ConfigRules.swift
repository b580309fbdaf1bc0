import Foundation

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
        guard findings.isEmpty else { return findings }

        if policy.action == .allowInsecure {
            findings.append(.warning(path + ["action"], "\(name) has action = \"allow-insecure\": its connections are not checked at all"))
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

extension HostPattern {
    /// Whether the pattern is an exact name (not `*.` and not an IP literal).
    var isExact: Bool {
        if case .exact = self { return true }
        return false
    }
}
