import FoundationEssentials
import PinproxyCore
import PinproxyInterop

/// The policy one `[default]` or `[hosts."PATTERN"]` entry applies, fully loaded: pins
/// parsed, pinned certificates, anchors and CRLs read. It fails closed by construction: it is
/// built only from `Settings` that verify the chain or the host against something (see
/// `init(_:)`), and it cannot be changed afterwards. Its settings read as its own properties
/// (`policy.pins`). A `mode = "tunnel"` entry is the one exception by design: the proxy relays
/// its connections without asking for a verdict (`ConfigRules` keeps it to named hosts).
@dynamicMemberLookup
public struct HostPolicy: Sendable {
    /// What to do with a connection.
    public enum Action: String, Sendable, CaseIterable {
        case verify
        case deny
        case allowInsecure = "allow-insecure"
    }

    /// The anchors a chain must verify to.
    public enum Trust: Sendable {
        /// The operating system's store.
        case system(TrustStore)
        /// The pinned certificates are the only anchors.
        case pinned(TrustStore)
        /// Listed certificate files; every listed certificate is an anchor.
        case anchors(TrustStore, [Certificate])
        /// `["system", FILE…]`: the operating system's store plus the listed certificates.
        case systemAndListed(TrustStore, [Certificate])
        /// The chain is not verified: pins alone protect the entry.
        case none

        /// The store chains are verified to; nil under `trust = "none"`.
        public var store: TrustStore? {
            switch self {
            case .system(let store), .pinned(let store), .anchors(let store, _), .systemAndListed(let store, _): return store
            case .none: return nil
            }
        }

        /// The config word for this trust.
        public var name: String {
            switch self {
            case .system: return "system"
            case .pinned: return "pinned"
            case .anchors(_, let certificates): return "\(certificates.count) listed anchor(s)"
            case .systemAndListed(_, let certificates): return "system + \(certificates.count) listed anchor(s)"
            case .none: return "none"
            }
        }
    }

    /// What a pin hashes.
    public enum PinKind: String, Sendable, CaseIterable {
        case none
        case publicKey = "public-key"
        case certificate
    }

    /// Where revocation status comes from.
    public enum Revocation: Sendable {
        case off
        case crl([RevocationList])
        case ocspStaple

        /// The config word.
        public var name: String {
            switch self {
            case .off: return "off"
            case .crl: return "crl"
            case .ocspStaple: return "ocsp-staple"
            }
        }
    }

    /// `ct`: Certificate Transparency for chains that end at a system-store anchor.
    public enum CTMode: String, Sendable, CaseIterable {
        case enforce
        /// `ct-missing` is logged as a would-refuse line; the connection goes on.
        case reportOnly = "report-only"
        case off
    }

    /// How a connection under the policy is carried.
    public enum Mode: String, Sendable, CaseIterable {
        /// Verified upstream, then relayed through pinproxy's own TLS with the client.
        case intercept
        /// The client's TLS relayed as it is: nothing is verified (a host entry only).
        case tunnel
    }

    /// The lowest TLS version accepted upstream.
    public enum TLSVersion: String, Sendable, CaseIterable {
        case v1_2 = "1.2"
        case v1_3 = "1.3"
    }

    /// Everything a policy decides with, freely set; `HostPolicy(_:)` admits only a safe set.
    public struct Settings: Sendable {
        public var action: Action = .verify
        public var trust: Trust
        public var validateHost = true
        public var pinKind: PinKind = .none
        /// Every accepted digest: the `pins` plus the digests of the pinned `certificates`.
        public var pins: [Pin] = []
        /// The pinned certificates as loaded from `certificates`.
        public var pinnedCertificates: [Certificate] = []
        public var enforce = true
        /// The `expires` date as written (YYYY-MM-DD), if any.
        public var expires: String?
        /// The first instant at which pins are no longer enforced: midnight UTC after `expires`.
        public var pinsExpireAt: Date?
        public var includeSubdomains = false
        public var ports: Set<UInt16>
        public var minTLS: TLSVersion = .v1_2
        public var revocation: Revocation = .off
        /// Whether chains verified to the system store or to listed anchors must also meet the
        /// web-PKI issuance rules (docs/trust-decisions.md); false for a private CA that skips them.
        public var requireWebPKIProfile = true
        /// `verify_command`: the operator's own check, run after the built-in ones passed, with
        /// the verified chain on stdin (`arguments[0]` is the executable's absolute path).
        public var verifyCommand: [String]?
        public var mode: Mode = .intercept
        public var ct: CTMode = .off
        /// `client_certificate` and `client_key`: presented to an upstream that asks for a
        /// client certificate.
        public var clientIdentity: TLSClientIdentity?

        /// Every default, with the given trust and ports.
        public init(trust: Trust, ports: Set<UInt16>) {
            self.trust = trust
            self.ports = ports
        }

        /// Why these settings would let a certificate through on the strength of nothing the
        /// policy checks; nil when they are safe. The loader reports the same rules with lines.
        public var failOpenReason: String? {
            let pinned = pinKind != .none && !pins.isEmpty
            if pinKind != .none && pins.isEmpty { return "pin = \"\(pinKind.rawValue)\" with no pins" }
            if trust.store == nil && !pinned { return "trust = \"none\" without pins would accept any certificate" }
            if !validateHost && !pinned { return "validate_host = false without pins would accept a certificate for any name" }
            let pinsAlone = trust.store == nil || !validateHost
            if pinsAlone && !enforce { return "enforce = false where the pins are the only protection would drop them" }
            if pinsAlone && expires != nil { return "expires where the pins are the only protection would end all protection" }
            return nil
        }
    }

    /// The settings whose pins are the only protection are refused.
    public struct FailOpenError: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    /// The validated settings.
    public let settings: Settings

    /// A policy with `settings`; throws when they fail open: no anchor and no pin, no host
    /// check and no pin, a pin kind without pins, or report-only or expiring pins where pins
    /// are the only protection.
    public init(_ settings: Settings) throws(FailOpenError) {
        if let reason = settings.failOpenReason { throw FailOpenError(description: reason) }
        self.settings = settings
    }

    public subscript<Value>(dynamicMember keyPath: KeyPath<Settings, Value>) -> Value {
        settings[keyPath: keyPath]
    }
}

extension HostPolicy.Settings {
    /// A string that changes whenever anything this policy decides with changes; the proxy keys
    /// its upstream TLS session cache with it.
    public var fingerprint: String {
        var parts: [String] = [action.rawValue, trust.name, "\(validateHost)", pinKind.rawValue,
                               pins.map(\.description).sorted().joined(separator: ","), "\(enforce)",
                               expires ?? "-", ports.sorted().map(String.init).joined(separator: ","),
                               minTLS.rawValue, revocation.name, "\(requireWebPKIProfile)",
                               verifyCommand.map { $0.joined(separator: "\u{0}") } ?? "-", mode.rawValue,
                               clientIdentity.map { Pin(digest: $0.certificate.certificateSHA256).description } ?? "-", ct.rawValue]
        switch trust {
        case .pinned: parts.append(pinnedCertificates.map { Pin(digest: $0.certificateSHA256).description }.joined(separator: ","))
        case .anchors(_, let certificates), .systemAndListed(_, let certificates):
            parts.append(certificates.map { Pin(digest: $0.certificateSHA256).description }.joined(separator: ","))
        case .system, .none: break
        }
        return Pin(digest: SHA256.hash(Array(parts.joined(separator: "|").utf8))).description
    }
}

/// One entry of the policy table, with where it was written. A class, so that the table's
/// indexes share one copy of each entry.
public final class PolicyEntry: Sendable {
    /// nil for `[default]`.
    public let pattern: HostPattern?
    /// The table name as written in the config: `default` or `hosts."api.example.com"`.
    public let name: String
    /// The line of the entry's table header (0 when the config did not write it).
    public let line: Int
    public let policy: HostPolicy
    /// The files the entry names, as written (relative to the config's directory).
    public let written: WrittenFiles
    private let cachedFingerprint = Locked<String?>(nil)

    /// The `trust` list and `crls` of an entry as the config writes them: what a block that
    /// replaces the entry must name again.
    public struct WrittenFiles: Sendable {
        /// `trust` when it is a list (with "system" where written); nil for a word.
        public var trust: [String]?
        public var crls: [String]?

        public init(trust: [String]? = nil, crls: [String]? = nil) {
            self.trust = trust
            self.crls = crls
        }
    }

    public init(pattern: HostPattern?, name: String, line: Int, policy: HostPolicy, written: WrittenFiles = WrittenFiles()) {
        self.pattern = pattern
        self.name = name
        self.line = line
        self.policy = policy
        self.written = written
    }

    /// `policy.fingerprint`, computed once (on first use, so a 100,000-entry `check` does not
    /// pay for it): the proxy keys its upstream session cache with it on every CONNECT.
    public var fingerprint: String {
        cachedFingerprint.withLock { cached in
            if let cached { return cached }
            let fingerprint = policy.fingerprint
            cached = fingerprint
            return fingerprint
        }
    }
}
