import FoundationEssentials
import TOMLKit
import PinproxyCore

extension ConfigSchema {
    /// The policy keys, valid in `[default]` and in every `[hosts."PATTERN"]`.
    static let policy = ConfigKeys<RawPolicy>([
        .choice("action", .policy, \.action, default: .verify,
                doc: "deny: always refuse; allow-insecure: no checks at all (`check` warns about it, and every such connection is logged)"),
        .init("trust", .policy, .wordOrStrings, \.trust, default: .system,
              values: #""system", "pinned", "none", or a list of PEM/DER files or directories, which may include "system""#,
              doc: #"the anchors the chain must verify to. A list: every listed certificate is an anchor, and a listed intermediate ends the path; with "system" in it (`["system", "corp-root.pem"]`), the OS store as well. "pinned": the pinned certificates are the only anchors, and a pinned leaf or intermediate may be the anchor. "none": the chain is not verified (pins are required, and only the leaf may match one)"#) {
            decoder, value, keyPath in
            if let word = value.string {
                switch word {
                case "system": return .system
                case "pinned": return .pinned
                case "none": return RawPolicy.Trust.none
                default:
                    decoder.error(keyPath, "\(displayKeyPath(keyPath)) = \"\(word)\" is not \"system\", \"pinned\", \"none\" or a list of certificate files")
                    return nil
                }
            } else if value.array != nil {
                // "system" in the list: the OS store as well as the listed files.
                guard let files = decoder.strings(value, keyPath, allowEmpty: false) else { return nil }
                let listed = files.filter { $0 != "system" }
                return listed.isEmpty ? .system : .listed(listed, includingSystem: listed.count < files.count)
            }
            decoder.typeError(keyPath, value, expected: "\"system\", \"pinned\", \"none\" or an array of certificate files")
            return nil
        },
        .bool("validate_host", .policy, \.validateHost, default: true,
              doc: "the CONNECT host must match the leaf's subjectAltName (DNS, or IP for IP literals; no CN fallback, no partial wildcards); false requires pins"),
        .choice("pin", .policy, \.pinKind, default: .none, doc: "what the pins are digests of"),
        .init("pins", .policy, .strings, \.pins, default: [], values: #"list of "sha256/BASE64""#,
              doc: "public-key: SHA-256 of the DER SubjectPublicKeyInfo; certificate: SHA-256 of the certificate DER") { decoder, value, keyPath in
            guard let texts = decoder.strings(value, keyPath) else { return nil }
            var pins: [Pin] = []
            pins.reserveCapacity(texts.count)
            for text in texts {
                if let pin = Pin(text) {
                    pins.append(pin)
                    continue
                }
                decoder.error(keyPath, element: text, "malformed pin \"\(text)\": a pin is \"sha256/\" followed by the 44-character padded base64 of a 32-byte SHA-256 digest (see `pinproxy pin FILE`)")
            }
            return pins
        },
        .strings("certificates", .policy, \.certificateFiles, default: [], values: "files or directories (.pem .crt .cer .der, any case; PEM, DER or bundles)",
                 doc: #"pinned certificates; with pin = "public-key" their keys are pinned"#),
        .bool("enforce", .policy, \.enforce, default: true,
              doc: #"false = report-only for pin-mismatch, revocation-unknown, host-denied and port-denied: the connection is allowed, the log says "would refuse" and the 200 carries `Pinproxy-Verdict: would-refuse <reason>`. untrusted-chain, certificate-expired, certificate-not-yet-valid, hostname-mismatch and revoked are always enforced"#),
        .init("expires", .policy, .date, \.expires, unset: "none", example: "2027-01-31",
              doc: "after this date pins are no longer enforced (the chain and host still are)") { decoder, value, keyPath in
            guard let date = value.date else {
                decoder.typeError(keyPath, value, expected: "a date such as 2027-01-31")
                return nil
            }
            var components = DateComponents()
            (components.year, components.month, components.day) = (date.year, date.month, date.day + 1)
            var calendar = Calendar(identifier: .gregorian)
            calendar.timeZone = .gmt
            guard let end = calendar.date(from: components) else {
                decoder.typeError(keyPath, value, expected: "a date such as 2027-01-31")
                return nil
            }
            return (written: "\(date.year.decimal(digits: 4))-\(date.month.decimal(digits: 2))-\(date.day.decimal(digits: 2))", end: end)
        },
        .bool("include_subdomains", .policy, \.includeSubdomains, default: false, doc: "the entry also matches every subdomain, at any depth"),
        .ports("ports", .policy, \.ports, unset: "proxy.allow_ports", example: "[443, 8443]", doc: "destination ports a CONNECT to the entry may name"),
        .choice("min_tls", .policy, \.minTLS, default: .v1_2, doc: "the oldest TLS version accepted upstream"),
        .choice("mode", .policy, \.mode, default: .intercept,
                doc: "tunnel: the client's TLS is relayed as it is, unverified (host entries only; see [trust-decisions.md](trust-decisions.md#tunnels-mode--tunnel))"),
        .choice("ct", .policy, \.ct, default: .off,
                doc: "Certificate Transparency for chains that end at a system-store anchor: enforce refuses a certificate without enough SCTs from the logs of `ct_log_list` (`ct-missing`), report-only logs it as would-refuse ([trust-decisions.md](trust-decisions.md#certificate-transparency-ct))"),
        .choice("revocation", .policy, \.revocation, default: .off,
                doc: "crl: the leaf is checked against its issuer's CRL from `crls`; ocsp-staple: the server must staple a valid OCSP response, signed by the issuer"),
        .strings("crls", .policy, \.crlFiles, unset: "none", values: "list of CRL files (PEM or DER)", example: #"["crl/issuer.crl"]"#,
                 doc: #"the CRLs for revocation = "crl""#),
        .bool("require_web_pki_profile", .policy, \.requireWebPKIProfile, default: true,
              doc: #"with `trust = "system"` or a list, the chain must also meet the web-PKI issuance rules ([trust-decisions.md](trust-decisions.md#the-web-pki-rules)); false for a private CA whose certificates lack extendedKeyUsage, key identifiers or a CN among the SANs"#),
        .init("verify_command", .policy, .strings, \.verifyCommand, unset: "none", values: "list of strings: an executable, then its arguments",
              example: #"["/usr/local/libexec/check-ct", "--strict"]"#,
              doc: "your own check after the built-in ones ([trust-decisions.md](trust-decisions.md#a-custom-check-verify_command))") {
            decoder, value, keyPath in
            guard let command = decoder.strings(value, keyPath, allowEmpty: false) else { return nil }
            if command[0].isEmpty {
                decoder.error(keyPath, "\(displayKeyPath(Array(keyPath.dropLast()))): verify_command starts with the executable's path, not an empty string")
                return nil
            }
            return command
        },
        .nonEmptyString("client_certificate", .policy, \.clientCertificateFile, unset: "none", values: "PEM file: the certificate, then its chain",
                        example: #""client/api.pem""#,
                        doc: "presented with `client_key` to an upstream that asks for a client certificate ([trust-decisions.md](trust-decisions.md#client-certificates-upstream))"),
        .nonEmptyString("client_key", .policy, \.clientKeyFile, unset: "none", values: "PEM file: the unencrypted key, mode 0600 or 0400",
                        example: #""client/api.key""#, doc: "the key of `client_certificate`"),
    ])
}
