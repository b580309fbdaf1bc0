import ArgumentParser
import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy

/// `pinproxy diagnose`: one screen about a live server — the TLS versions and ALPN protocols it
/// accepts, the chain it sends, each check of the entry that applies to it, and a complete
/// entry that would allow it.
struct DiagnoseCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "diagnose",
        abstract: "Probe a live server: TLS versions, ciphers, ALPN, the chain as sent, and the policy's verdict.",
        discussion: """
            Direct connections (SNI = HOST); the config's [resolve] is honoured and the entry that matches HOST \
            is checked the way the daemon checks it. On the built-in default config, the checks of its [default] \
            (the system store and the host name) at any port. Exit 0 when the policy would allow, 1 otherwise, \
            2 on usage and config errors.
            """
    )

    @Argument(help: ArgumentHelp("The server, port 443 by default.", valueName: "HOST[:PORT]"))
    var target: String

    @Option(name: .long, help: ArgumentHelp(ConfigSource.help, valueName: "FILE"))
    var config: String?

    @Option(name: .long, help: ArgumentHelp("Connect to this address instead (SNI stays HOST).", valueName: "ADDRESS[:PORT]"))
    var connectTo: String?

    @Option(name: .long, help: "Seconds for every connection and handshake together.")
    var timeout: Double = 10

    func run() throws {
        guard let (host, port) = PinCommand.splitHostPort(target) else {
            throw ValidationError("HOST[:PORT] expected (IPv6 in brackets), not \"\(target)\"")
        }
        guard timeout > 0 else { throw ValidationError("--timeout must be positive") }
        let source = ConfigSource.resolve(config)
        source.announce(option: config)
        let loaded: Config
        do { loaded = try source.load() } catch {
            for diagnostic in error.diagnostics { printError(diagnostic.description) }
            throw ExitCode(2)
        }
        let (address, connectPort) = try destination(host: host, port: port, config: loaded)
        let serverName = host.serverName
        let entry = source == .embedded ? try Self.builtInEntry(loaded, port: port) : loaded.policies.lookup(host)
        let minimum: BlockingTLSConnection.Version? = entry.policy.minTLS == .v1_3 ? .tls13 : nil
        // One --timeout for every probe. Each connection is closed as soon as it is read.
        let deadline = Deadline(after: timeout)
        func probe<Value>(_ version: BlockingTLSConnection.Version?, alpn: [String] = [], staple: Bool = false,
                          _ read: (BlockingTLSConnection) -> Value) -> Result<Value, Error> {
            guard deadline.remaining > 0 else { return .failure(NotTried(seconds: timeout)) }
            return Result { read(try BlockingTLSConnection(host: address, port: connectPort, serverName: serverName, version: version,
                                                    alpn: alpn, requestStaple: staple, requestSCTs: staple && entry.policy.ct != .off,
                                                    deadline: deadline)) }
        }
        // The probe whose chain is judged goes first, then ALPN, then each version alone: a
        // server that stalls or drops some probes still leaves the most to say.
        let main = probe(minimum, alpn: ["h2", "http/1.1"], staple: true) {
            (chain: $0.chain, version: $0.version, staple: $0.ocspStaple, scts: $0.tlsExtensionSCTs)
        }
        let alpnProbes = ["h2", "http/1.1"].map { name in (name, probe(nil, alpn: [name]) { $0.alpn }) }
        let versionProbes = BlockingTLSConnection.Version.allCases.map { version in
            (version, probe(version) { (cipher: $0.cipher, forwardSecrecy: $0.forwardSecrecy) })
        }

        // Under the egress lock, a user who is not exempt reaches pinproxy, not the server.
        if case .success(let value) = main { try CapturedChain.refuse(value.chain, target: target, config: loaded) }
        print("pinproxy diagnose \(host):\(port) (connecting to \(Self.literal(address)):\(connectPort), SNI \(serverName ?? "none"))")
        print("")
        print("protocols:")
        var accepted: [BlockingTLSConnection.Version] = []
        for (version, result) in versionProbes {
            switch result {
            case .success(let handshake):
                accepted.append(version)
                let flag = version.isDeprecated ? "  ! deprecated: disable it on the server" : ""
                print("  \(version.rawValue)  accepted  \(handshake.cipher)  \(handshake.forwardSecrecy ? "forward secrecy" : "NO forward secrecy")\(flag)")
            case .failure(let error as NotTried):
                print("  \(version.rawValue)  not tried (\(error))")
            case .failure(let error):
                print("  \(version.rawValue)  \(Self.timedOut(error) ? "no answer" : "refused  ") (\(Self.brief(error)))")
            }
        }
        let alpnLines = alpnProbes.map { name, result in
            switch result {
            case .success(let selected): return selected == name ? "\(name) accepted" : "\(name) not accepted"
            case .failure(let error as NotTried): return "\(name) not tried (\(error))"
            case .failure(let error): return Self.timedOut(error) ? "\(name) timed out" : "\(name) not accepted"
            }
        }
        print("ALPN: " + alpnLines.joined(separator: ", ") + (alpnLines.allSatisfy { $0.hasSuffix("not accepted") } ? " (the server selects no protocol)" : ""))

        let handshake: (chain: [Certificate], version: String, staple: [UInt8]?, scts: [[UInt8]])
        switch main {
        case .success(let value): handshake = value
        case .failure(let error):
            print("")
            print("no TLS handshake at or above TLS \(entry.policy.minTLS.rawValue): \(error)")
            if let failure = error as? BlockingTLSConnection.HandshakeFailure, !failure.chain.isEmpty {
                print("certificates that arrived before it stopped (the server has not proven it holds the leaf's key): \(failure.chain.count)")
                printCertificates(failure.chain)
            }
            let reason: RefusalReason = Self.timedOut(error) ? .upstreamTimeout : accepted.isEmpty ? .handshakeFailed : .tlsVersion
            print("verdict: refuse: \(reason.rawValue)")
            throw ExitCode(1)
        }
        print("OCSP staple: " + (handshake.staple.map { "sent (\($0.count) bytes)" } ?? "not sent"))
        let verdict = TrustEvaluator.evaluate(.init(chain: handshake.chain, ocspStaple: handshake.staple, tlsExtensionSCTs: handshake.scts),
                                              host: host, port: port, entry: entry, context: loaded.verdictContext, at: Date())
        print("")
        printChain(handshake.chain, verdict: verdict)
        var suggestion = SuggestedEntry(host: host, port: port, chain: handshake.chain, entry: entry, verdict: verdict,
                                        allowPorts: loaded.proxy.allowPorts, config: source == .embedded ? nil : loaded)
        // A leaf sent without its issuer, which no anchor this host has issued: the issuer its
        // AIA URL names may complete a path to one (a plain HTTP GET, within the --timeout).
        if try suggestion.needsIssuer, let leaf = handshake.chain.first {
            suggestion.fetchedIssuer = AIAIssuer.fetch(for: leaf, deadline: deadline)
            print("  " + (suggestion.fetchedIssuer?.summary(leaf: leaf) ?? "the leaf names no URL for its issuer (AIA caIssuers)"))
        }
        print("")
        printChecks(verdict, entry: entry, negotiated: handshake.version, config: source)
        print("")
        print(try suggestion.render())
        if !verdict.allowsConnection { throw ExitCode(1) }
    }

    /// The address to connect to: `--connect-to`, else the config's `[resolve]`, else HOST.
    func destination(host: TargetHost, port: UInt16, config: Config) throws -> (String, UInt16) {
        if let connectTo {
            if let address = IPAddress(connectTo.trimmingBrackets()) {
                return (address.description, port)
            }
            guard let (target, connectPort) = PinCommand.splitHostPort(connectTo) else {
                throw ValidationError("--connect-to takes ADDRESS or ADDRESS:PORT, not \"\(connectTo)\"")
            }
            return (Self.bare(target), connectPort)
        }
        if case .name(let name) = host, let addresses = config.resolve[name], let first = addresses.first {
            return (first.description, port)
        }
        return (Self.bare(host), port)
    }

    func printChain(_ chain: [Certificate], verdict: Verdict) {
        print("chain as sent: \(chain.count) certificate(s)")
        printCertificates(chain)
        let misordered = chain.indices.dropLast().filter { !chain[$0].isIssued(by: chain[$0 + 1]) }
        print("  order: " + (misordered.isEmpty ? "leaf first, each certificate issued by the next"
                                                 : "NOT in order: " + misordered.map { "[\($0 + 1)] did not issue [\($0)]" }.joined(separator: "; ")))
        let rootSent = chain.count > 1 && chain.last!.isSelfIssued
        print("  root included: " + (rootSent ? "yes (servers need not send it)" : "no"))
        if let last = chain.last {
            let chainFailed = verdict.failures.contains { $0.reason == .untrustedChain }
            if last.isSelfIssued || (!verdict.verified.isEmpty && !chainFailed) {
                print("  complete: yes" + (verdict.verified.last.map { " (ends at \($0.subject))" } ?? ""))
            } else {
                print("  complete: no, or not to an anchor of this policy: \(last.issuer), the issuer of [\(chain.count - 1)], was not sent")
            }
        }
    }

    /// Each certificate's subject, issuer, key, expiry and both pins.
    func printCertificates(_ chain: [Certificate]) {
        let now = Date()
        for (index, certificate) in chain.enumerated() {
            let days = Int((certificate.notAfter.timeIntervalSince(now) / 86_400).rounded(.down))
            print("  [\(index)] \(certificate.subject)")
            print("      issuer: \(certificate.issuer)")
            print("      key: \(certificate.publicKeyDescription)  expires: \(rfc3339(certificate.notAfter)) (\(days < 0 ? "EXPIRED \(-days) day(s) ago" : "in \(days) day(s)"))")
            print("      public-key: \(Pin(digest: certificate.publicKeySHA256))")
            print("      certificate: \(Pin(digest: certificate.certificateSHA256))")
        }
    }

    /// The verdict's checks, a line for each part of the policy: the request (when it failed),
    /// trust (the chain and the web-PKI rules on it), the host name (with the rules on the
    /// names), pins and revocation, then the TLS version the handshake negotiated.
    func printChecks(_ verdict: Verdict, entry: PolicyEntry, negotiated: String, config: ConfigSource) {
        let policy = entry.policy
        var lines: [Line: [Verdict.Failure]] = [:]
        var statuses: [Line: CheckResult.Status] = [:]
        for result in verdict.checks {
            let line = Line(result)
            lines[line, default: []] += result.failures
            if case .rule = result.check {} else { statuses[line] = result.status }
        }
        func failures(_ line: Line) -> String? {
            guard let found = lines[line], !found.isEmpty else { return nil }
            return found.sorted { $0.reason < $1.reason }.map(\.description).joined(separator: "; ")
        }
        func line(_ check: String, _ state: String, _ text: String) {
            print("  \(check.padded(to: 11)) \(state.padded(to: 11)) \(text)")
        }
        if let path = config.path {
            print("policy: entry \(entry.name)" + (entry.line > 0 ? " (line \(entry.line))" : "") + " of \(path)")
        } else {
            print("policy: the built-in default's [default]: the system trust store and the host name, at any port")
        }
        if let request = failures(.request) { line("request", "FAIL", request) }
        if policy.action == .allowInsecure {
            line("checks", "skipped", "action = \"allow-insecure\": the daemon checks nothing for this host")
        } else {
            if statuses[.trust] == .notChecked {
                line("trust", "not checked", "trust = \"none\": only the pinned leaf protects this entry")
            } else if let trust = failures(.trust) {
                line("trust", "FAIL", trust)
            } else {
                line("trust", "pass", "verified to \(verdict.verified.last?.subject ?? "-") (trust \(policy.trust.name))")
            }
            if statuses[.hostName] == .notChecked {
                line("host name", "not checked", "validate_host = false")
            } else if let hostName = failures(.hostName) {
                line("host name", "FAIL", hostName)
            } else {
                line("host name", "pass", "\(verdict.presented.first?.subjectAlternativeNames.joined(separator: ", ") ?? "") covers the host")
            }
            switch verdict.pinCheck {
            case .notPinned: line("pins", "none", "the entry pins nothing")
            case .expired(let date): line("pins", "not checked", "the pins expired after \(date)")
            case .matched(let pin, let position): line("pins", "pass", "\(pin) matched [\(position)] \(verdict.verified[position].subject)")
            case .noMatch: line("pins", "FAIL", failures(.pins) ?? "")
            case .notReached: line("pins", "not checked", "the checks before them failed")
            }
            if case .off = policy.revocation {
                line("revocation", "off", "")
            } else {
                line("revocation", failures(.revocation) == nil ? "pass" : "FAIL", failures(.revocation) ?? policy.revocation.name)
            }
            if policy.ct != .off {
                let ct = VerdictReport.ctLines(verdict)
                line("ct", failures(.certificateTransparency) == nil ? (verdict.certificateTransparency == nil ? "not checked" : "pass") : "FAIL",
                     failures(.certificateTransparency) ?? String(ct[0].dropFirst("certificate transparency: ".count)))
                for sct in ct.dropFirst() { print("  \(sct)") }
            }
            line("min_tls", "pass", "\(policy.minTLS.rawValue): negotiated \(negotiated)")
        }
        print("verdict: \(verdict.summary)")
    }

    /// The line of `printChecks` a check shows on. A web-PKI rule shows with what it protects:
    /// the names the host check relies on, or the chain.
    enum Line: Hashable {
        case request, trust, hostName, pins, revocation, certificateTransparency, customCheck

        init(_ result: CheckResult) {
            switch result.check {
            case .action, .ports, .client: self = .request
            case .chain: self = .trust
            case .rule: self = result.failures.contains { $0.reason == .hostnameMismatch } ? .hostName : .trust
            case .hostName: self = .hostName
            case .pins: self = .pins
            case .revocation: self = .revocation
            case .certificateTransparency: self = .certificateTransparency
            case .customCheck: self = .customCheck
            }
        }
    }

    /// The built-in default's `[default]` (the system store, the name checked), at `port`: what
    /// `diagnose` applies on the built-in default, whose `allow_ports` would refuse most probes.
    static func builtInEntry(_ config: Config, port: UInt16) throws -> PolicyEntry {
        var settings = config.policies.defaultEntry.policy.settings
        settings.ports.insert(port)
        return PolicyEntry(pattern: nil, name: "default", line: 0, policy: try HostPolicy(settings))
    }

    static func bare(_ host: TargetHost) -> String {
        host.description.trimmingBrackets()
    }

    static func literal(_ address: String) -> String {
        address.contains(":") ? "[\(address)]" : address
    }

    /// A probe not made: the ones before it used up the `--timeout`.
    struct NotTried: Error, CustomStringConvertible {
        let seconds: Double
        var description: String { "the --timeout of \(seconds.secondsText) s was used up" }
    }

    /// Whether `error` is the `--timeout` running out, connecting or in the handshake.
    static func timedOut(_ error: Error) -> Bool {
        error is TimedOut || (error as? BlockingTLSConnection.HandshakeFailure)?.cause is TimedOut
    }

    static func brief(_ error: Error) -> String {
        let text = "\(error)"
        return text.count > 160 ? String(text.prefix(157)) + "..." : text
    }
}
