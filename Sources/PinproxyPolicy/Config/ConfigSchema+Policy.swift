import Foundation

extension ConfigSchema {
    /// The policy keys, valid in `[default]` and in every `[hosts."PATTERN"]`.
    static let policy = ConfigKeys<RawPolicy>([
        .choice("action", .policy, HostPolicy.Action.self, default: .value(#""verify""#),
                doc: "deny: always refuse; allow-insecure: no checks at all (`check` warns about it, and every such connection is logged)") {
            $0.action = $1
        },
        .init("trust", .policy, .wordOrStrings, default: .value(#""system""#),
              values: #""system", "pinned", "none", or a list of PEM/DER files or directories, which may include "system""#,
              doc: #"the anchors the chain must verify to. A list: every listed certificate is an anchor, and a listed intermediate ends the path; with "system" in it (`["system", "corp-root.pem"]`), the OS store as well. "pinned": the pinned certificates are the only anchors, and a pinned leaf or intermediate may be the anchor. "none": the chain is not verified (pins are required, and only the leaf may match one)"#) {
            decoder, value, keyPath, policy in
            if let word = value.string {
                switch word {
                case "system": policy.trust = .system
                case "pinned": policy.trust = .pinned
                case "none": policy.trust = .none
                default: decoder.error(keyPath, "\(displayKeyPath(keyPath)) = \"\(word)\" is not \"system\", \"pinned\", \"none\" or a list of certificate files")
                }
            } else if value.array != nil {
                // "system" in the list: the OS store as well as the listed files.
                if let files = decoder.strings(value, keyPath, allowEmpty: false) {
                    let listed = files.filter { $0 != "system" }
                    policy.trust = listed.isEmpty ? .system : .listed(listed, includingSystem: listed.count < files.count)
                }
            } else {
                decoder.typeError(keyPath, value, expected: "\"system\", \"pinned\", \"none\" or an array of certificate files")
            }
        },
        .bool("validate_host", .policy, default: .value("true"),
              doc: "the CONNECT host must match the leaf's subjectAltName (DNS, or IP for IP literals; no CN fallback, no partial wildcards); false requires pins") {
            $0.validateHost = $1
        },
        .choice("pin", .policy, HostPolicy.PinKind.self, default: .value(#""none""#), doc: "what the pins are digests of") { $0.pinKind = $1 },
        .init("pins", .policy, .strings, default: .value("[]"), values: #"list of "sha256/BASE64""#,
              doc: "public-key: SHA-256 of the DER SubjectPublicKeyInfo; certificate: SHA-256 of the certificate DER") { decoder, value, keyPath, policy in
            guard let texts = decoder.strings(value, keyPath) else { return }
            for text in texts {
                if let pin = Pin(text) {
                    policy.pins.append(pin)
                    continue
                }
                decoder.error(keyPath, element: text, "malformed pin \"\(text)\": a pin is \"sha256/\" followed by the 44-character padded base64 of a 32-byte SHA-256 digest (see `pinproxy pin FILE`)")
            }
        },
        .strings("certificates", .policy, default: .value("[]"), values: "files or directories (.pem .crt .cer .der, any case; PEM, DER or bundles)",
                 doc: #"pinned certificates; with pin = "public-key" their keys are pinned"#) { $0.certificateFiles = $1 },
        .bool("enforce", .policy, default: .value("true"),
              doc: #"false = report-only for pin-mismatch, revocation-unknown, host-denied and port-denied: the connection is allowed, the log says "would refuse" and the 200 carries `Pinproxy-Verdict: would-refuse <reason>`. untrusted-chain, certificate-expired, certificate-not-yet-valid, hostname-mismatch and revoked are always enforced"#) {
            $0.enforce = $1
        },
        .init("expires", .policy, .date, default: .unset("none"),
              doc: "after this date pins are no longer enforced (the chain and host still are)") { decoder, value, keyPath, policy in
            guard let date = value.date else {
                decoder.typeError(keyPath, value, expected: "a date such as 2027-01-31")
                return
            }
            var components = DateComponents()
            (components.year, components.month, components.day) = (date.year, date.month, date.day + 1)
            var calendar = Calendar(identifier: .gregorian)
            calendar.timeZone = .gmt
            guard let end = calendar.date(from: components) else {
                decoder.typeError(keyPath, value, expected: "a date such as 2027-01-31")
                return
            }
            policy.expires = (String(format: "%04d-%02d-%02d", date.year, date.month, date.day), end)
        },
        .bool("include_subdomains", .policy, default: .value("false"), doc: "the entry also matches every subdomain, at any depth") {
            $0.includeSubdomains = $1
        },
        .ports("ports", .policy, default: .unset("proxy.allow_ports"), doc: "destination ports a CONNECT to the entry may name") { $0.ports = $1 },
        .choice("min_tls", .policy, HostPolicy.TLSVersion.self, default: .value(#""1.2""#), doc: "the oldest TLS version accepted upstream") {
            $0.minTLS = $1
        },
        .choice("mode", .policy, HostPolicy.Mode.self, default: .value(#""intercept""#),
                doc: "tunnel: the client's TLS is relayed as it is, unverified (host entries only; see [trust-decisions.md](trust-decisions.md#tunnels-mode--tunnel))") {
            $0.mode = $1
        },
        .choice("ct", .policy, HostPolicy.CTMode.self, default: .value(#""off""#),
                doc: "Certificate Transparency for chains that end at a system-store anchor: enforce refuses a certificate without enough SCTs from the logs of `ct_log_list` (`ct-missing`), report-only logs it as would-refuse ([trust-decisions.md](trust-decisions.md#certificate-transparency-ct))") {
            $0.ct = $1
        },
        .choice("revocation", .policy, RawPolicy.Revocation.self, default: .value(#""off""#),
                doc: "crl: the leaf is checked against its issuer's CRL from `crls`; ocsp-staple: the server must staple a valid OCSP response, signed by the issuer") {
            $0.revocation = $1
        },
        .strings("crls", .policy, default: .unset("none"), values: "list of CRL files (PEM or DER)", doc: #"the CRLs for revocation = "crl""#) {
            $0.crlFiles = $1
        },
        .bool("require_web_pki_profile", .policy, default: .value("true"),
              doc: #"with `trust = "system"` or a list, the chain must also meet the web-PKI issuance rules ([trust-decisions.md](trust-decisions.md#the-web-pki-rules)); false for a private CA whose certificates lack extendedKeyUsage, key identifiers or a CN among the SANs"#) {
            $0.requireWebPKIProfile = $1
        },
        .init("verify_command", .policy, .strings, default: .unset("none"), values: "list of strings: an executable, then its arguments",
              doc: "your own check after the built-in ones ([trust-decisions.md](trust-decisions.md#a-custom-check-verify_command))") {
            decoder, value, keyPath, policy in
            guard let command = decoder.strings(value, keyPath, allowEmpty: false) else { return }
            if command[0].isEmpty { decoder.error(keyPath, "\(policy.name): verify_command starts with the executable's path, not an empty string") } else { policy.verifyCommand = command }
        },
        .nonEmptyString("client_certificate", .policy, default: .unset("none"), values: "PEM file: the certificate, then its chain",
                        doc: "presented with `client_key` to an upstream that asks for a client certificate ([trust-decisions.md](trust-decisions.md#client-certificates-upstream))") {
            $0.clientCertificateFile = $1
        },
        .nonEmptyString("client_key", .policy, default: .unset("none"), values: "PEM file: the unencrypted key, mode 0600 or 0400",
                        doc: "the key of `client_certificate`") { $0.clientKeyFile = $1 },
    ])
}
