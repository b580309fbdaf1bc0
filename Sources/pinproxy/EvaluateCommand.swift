import ArgumentParser
import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import PinproxyProxy

/// `pinproxy evaluate`: the daemon's verdict on a chain from a file, offline.
struct EvaluateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "evaluate",
        abstract: "Evaluate a certificate chain against the policy for a host, offline.",
        discussion: "The first line is `allow`, `refuse: <reason>` or `allow (would refuse: <reason>)`. Exit 0 allow, 1 refuse, 2 usage or config error. With --client, the config's [clients] sections apply to a client of that identity (selectors combine: --client user:alice --client exe:/usr/bin/git)."
    )

    @Option(name: .long, help: ArgumentHelp(ConfigSource.help, valueName: "FILE"))
    var config: String?

    @Option(name: .long, help: "The host as a client would CONNECT to it (IPv6 with or without brackets).")
    var host: String

    @Option(name: .long, help: "The destination port.")
    var port: Int = 443

    @Option(name: .long, help: ArgumentHelp("The chain as the server presents it, leaf first (PEM bundle or DER).", valueName: "FILE"))
    var chain: String

    @Option(name: .long, help: ArgumentHelp("Evaluate at this time instead of now (a date alone means T00:00:00Z).", valueName: "RFC3339"))
    var at: String?

    @Option(name: .long, help: ArgumentHelp("A DER OCSP response standing in for the server's staple.", valueName: "FILE"))
    var staple: String?

    @Option(name: .long, help: ArgumentHelp("A file of SCTs standing in for the server's TLS extension (a SignedCertificateTimestampList, RFC 6962, as its bytes).", valueName: "FILE"))
    var tlsScts: String?

    @Option(name: .long, parsing: .singleValue,
            help: ArgumentHelp("The client, as [clients] selectors name it: uid:N, user:NAME, exe:/path, unit:NAME.service (with a uid: or user:), unknown or remote; repeat to combine.", valueName: "SELECTOR"))
    var client: [String] = []

    func run() throws {
        guard let target = TargetHost(host) else { throw ValidationError("--host \"\(host)\" is not a host name or IP literal") }
        guard (1...65_535).contains(port) else { throw ValidationError("--port must be between 1 and 65535") }
        let time: Date
        if let at {
            guard let parsed = Self.parseRFC3339(at) else { throw ValidationError("--at \"\(at)\" is not an RFC 3339 time such as 2026-06-01T00:00:00Z, nor a date such as 2026-06-01") }
            time = parsed
        } else {
            time = Date()
        }
        let source = ConfigSource.resolve(config)
        source.announce(option: config)
        let loaded: Config
        do throws(ConfigError) {
            loaded = try source.load(now: time)
        } catch {
            for diagnostic in error.diagnostics { printError(diagnostic.description) }
            throw ExitCode(2)
        }
        let identity = try client.isEmpty ? nil : Self.identity(client)
        let certificates = try Self.readCertificates(chain)
        var stapleBytes: [UInt8]?
        if let staple {
            do {
                stapleBytes = try FilePathBytes.commandLineArgument(staple).read(.staple)
            } catch {
                throw ValidationError("--staple \(staple): the file \(error)")
            }
        }

        var tlsExtensionSCTs: [[UInt8]] = []
        if let tlsScts {
            let bytes: [UInt8]
            do {
                bytes = try FilePathBytes.commandLineArgument(tlsScts).read(.staple)
            } catch {
                throw ValidationError("--tls-scts \(tlsScts): the file \(error)")
            }
            guard let list = SignedCertificateTimestamps.list(tlsEncoded: bytes) else {
                throw ValidationError("--tls-scts \(tlsScts): not a SignedCertificateTimestampList")
            }
            tlsExtensionSCTs = list
        }

        let entry = loaded.policies.lookup(target)
        var verdict = TrustEvaluator.evaluate(.init(chain: certificates, ocspStaple: stapleBytes, tlsExtensionSCTs: tlsExtensionSCTs),
                                              host: target, port: UInt16(port), entry: entry, context: loaded.verdictContext, at: time)
        if TrustEvaluator.needsCustomCheck(verdict), let command = entry.policy.verifyCommand {
            // As the daemon does: the verified chain on stdin, after the built-in checks passed,
            // and the client (with --client) in its environment.
            let check = CustomChecks.run(command, host: target.description.trimmingBrackets(),
                                         port: UInt16(port), client: CustomChecks.environment(for: loaded.clients.isEmpty ? nil : identity),
                                         input: Array(verdict.verified.map(\.pem).joined().utf8), timeout: loaded.proxy.verifyCommandTimeout)
            verdict = TrustEvaluator.adding(check, to: verdict)
        }
        var clientLines: [String] = []
        if let identity {
            let decision = ClientPolicy.decide(host: target, identity: identity, rules: loaded.clients)
            verdict = TrustEvaluator.adding(decision, to: verdict)
            clientLines.append("client: \(identity)  [clients] sections: \(decision.sections.isEmpty ? "none" : decision.sections.joined(separator: ", "))")
        } else if !loaded.clients.isEmpty {
            clientLines.append("note: the config's [clients] sections were not applied: give --client SELECTOR")
        }
        print(verdict.summary)
        print(([VerdictReport(verdict: verdict, host: target, port: UInt16(port), time: time).text] + clientLines).joined(separator: "\n"))
        if !verdict.allowsConnection { throw ExitCode(1) }
    }

    /// The client the `--client` selectors describe together: `unknown` or `remote` alone, a
    /// forwarded client from the first address of a `net:` network alone (`net:172.17.0.5/32`), or
    /// a local client with a uid (from `uid:` or `user:`) and any of `exe:` and `unit:`.
    static func identity(_ selectors: [String]) throws -> ClientIdentity {
        var uid: UInt32?
        var user: String?
        var unit: String?
        var exe: String?
        for selector in selectors {
            switch ClientSelectorText.parse(selector) {
            case .failure(let problem): throw ValidationError("--client \(selector): \(problem)")
            case .success(.unknown), .success(.remote):
                guard selectors.count == 1 else { throw ValidationError("--client \(selector) stands alone: an unknown or remote client has no uid, unit or program") }
                return selector == "remote" ? .remote : .unknown(why: "--client unknown")
            case .success(.network(let network)):
                guard selectors.count == 1 else { throw ValidationError("--client \(selector) stands alone: a forwarded client has no uid, unit or program") }
                return .forwarded(network.prefix)
            case .success(.uid(let number)):
                uid = number
                if case .found(let name) = UserDatabase.name(ofUID: number) { user = name }
            case .success(.user(let name)):
                guard case .found(let number) = UserDatabase.uid(ofUser: name) else { throw ValidationError("--client \(selector): the user database has no user \(name)") }
                (uid, user) = (number, name)
            case .success(.exe(let path)): exe = path
            case .success(.unit(let name)): unit = name
            }
        }
        guard let uid else { throw ValidationError("--client: a local client has a uid: add --client uid:N or --client user:NAME") }
        return .local(LocalClient(uid: uid, user: user, unit: unit, exe: exe))
    }

    static func readCertificates(_ path: String) throws -> [Certificate] {
        let bytes: [UInt8]
        do {
            bytes = try FilePathBytes.commandLineArgument(path).read(.certificates)
        } catch {
            throw ValidationError("--chain \(path): the file \(error)")
        }
        do {
            return try Certificate.parseAll(bytes)
        } catch {
            throw ValidationError("--chain \(path) \(error)")
        }
    }

    /// An RFC 3339 time, or a date alone (`2046-01-01`: its first instant, UTC).
    static func parseRFC3339(_ text: String) -> Date? {
        if text.count == 10 { return try? Date.ISO8601FormatStyle().year().month().day().parse(text) }
        if let date = try? Date.ISO8601FormatStyle().parse(text) { return date }
        return try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(text)
    }
}

/// The detail `evaluate` prints under the verdict line.
struct VerdictReport {
    let verdict: Verdict
    let host: TargetHost
    let port: UInt16
    let time: Date

    var text: String {
        var lines: [String] = []
        let entry = verdict.entry
        lines.append("entry: \(entry.name)" + (entry.line > 0 ? " (line \(entry.line))" : " (built-in default)"))
        if entry.policy.mode == .tunnel {
            lines.append("mode: tunnel: the daemon relays this host unverified; this verdict is only what intercepting it would decide")
        }
        lines.append("host: \(host)  port: \(port)  at: \(rfc3339(time))")
        lines.append("presented chain:")
        for (index, certificate) in verdict.presented.enumerated() {
            lines.append("  [\(index)] \(certificate.subject)")
            lines.append("      issuer: \(certificate.issuer)")
            lines.append("      not before: \(rfc3339(certificate.notBefore))  not after: \(rfc3339(certificate.notAfter))")
            lines.append("      public-key: \(Pin(digest: certificate.publicKeySHA256))")
            lines.append("      certificate: \(Pin(digest: certificate.certificateSHA256))")
        }
        // What kept the chain from verifying: the verdict's chain and revocation checks' failures
        // that no `enforce = false` softens (untrusted, expired, not yet valid, revoked).
        let chainFailure = verdict.checks.filter { $0.check == .chain || $0.check == .revocation }.flatMap(\.failures)
            .sorted { $0.reason < $1.reason }.first { !$0.reason.traits.mayBeReportOnly }
        if !verdict.verified.isEmpty {
            let label = chainFailure.map { "chain built, not verified (\($0.reason.rawValue))" } ?? "verified chain"
            lines.append("\(label): " + verdict.verified.enumerated().map { "[\($0.offset)] \($0.element.subject)" }.joined(separator: " <- "))
        }
        switch verdict.pinCheck {
        case .notPinned: lines.append("pins: the entry pins nothing")
        case .expired(let date): lines.append("pins: not enforced, they expired after \(date)")
        case .matched(let pin, let position) where chainFailure != nil:
            lines.append("pins: \(pin) is carried by certificate [\(position)] \(verdict.verified[position].subject): not a match, since pins count only on a chain OpenSSL verified")
        case .matched(let pin, let position):
            lines.append("pins: \(pin) matched certificate [\(position)] \(verdict.verified[position].subject)")
        case .noMatch:
            lines.append("pins: none of \(verdict.entry.policy.pins.count) matched: " + verdict.entry.policy.pins.map(\.description).joined(separator: ", "))
        case .notReached: lines.append("pins: not checked")
        }
        lines += Self.ctLines(verdict)
        if verdict.failures.isEmpty {
            lines.append("failures: none")
        } else {
            lines.append("failures:")
            lines += verdict.failures.map { "  \($0)" }
        }
        lines += verdict.notes.map { "note: \($0)" }
        return lines.joined(separator: "\n")
    }

    /// The CT check's answer and every SCT found, counted or why not (nothing when `ct` is off).
    static func ctLines(_ verdict: Verdict) -> [String] {
        guard verdict.entry.policy.ct != .off else { return [] }
        guard let judgement = verdict.certificateTransparency else { return ["certificate transparency: not checked"] }
        let answer = switch judgement.outcome {
        case .notApplicable(let why): "not applied: \(why)"
        case .compliant(let how): "compliant: \(how)"
        case .notCompliant(let why): "NOT compliant: \(why)"
        }
        return ["certificate transparency: \(answer)"] + (judgement.entries.isEmpty ? ["  no SCT found"] : judgement.entries.map { "  sct: \($0)" })
    }
}
