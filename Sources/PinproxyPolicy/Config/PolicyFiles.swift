import Glibc
import FoundationEssentials
import PinproxyCore
import PinproxyInterop

/// The third stage of loading: reads the certificate and CRL files a checked policy names,
/// builds its trust store and the `HostPolicy` itself. Each certificate file is read once per
/// instance, however many entries name it.
struct PolicyFiles {
    /// Relative paths are resolved here.
    let directory: String
    let now: Date
    /// The system trust store, read once per load (on another core, while TOMLKit parses).
    let systemStore: @Sendable () -> Result<TrustStore, Error>
    private var certificateFiles: [String: [Certificate]] = [:]

    static let certificateExtensions: Set<String> = ["pem", "crt", "cer", "der"]

    init(directory: String, now: Date, systemStore: @escaping @Sendable () -> Result<TrustStore, Error>) {
        self.directory = directory
        self.now = now
        self.systemStore = systemStore
    }

    /// What the files an entry names hold.
    struct Contents {
        /// `verify_command` with its executable's path resolved.
        var verifyCommand: [String]?
        var pinned: [Certificate] = []
        var revocationLists: [RevocationList] = []
        /// The listed `trust` certificates (the pinned ones under `trust = "pinned"`).
        var anchors: [Certificate] = []
    }

    /// Reads every file `raw` names, reporting each one that is missing or unusable. It needs
    /// no rule to hold, so the loader reads the files of an entry that breaks one too.
    mutating func read(_ raw: RawPolicy) -> (Contents, [Finding]) {
        var findings: [Finding] = []
        var contents = Contents()
        if let command = raw.verifyCommand {
            let executable = resolve(command[0])
            if Self.isExecutableFile(executable) {
                contents.verifyCommand = [executable] + command.dropFirst()
            } else {
                findings.append(.error(raw.path + ["verify_command"], element: command[0],
                                       "\(raw.name): verify_command \"\(command[0])\" is not an executable file (\(executable))"))
            }
        }
        contents.pinned = certificates(raw.certificateFiles, raw.path + ["certificates"], what: "pinned certificate", into: &findings) ?? []
        if raw.revocation == .crl || raw.crlFiles != nil {
            contents.revocationLists = revocationLists(raw.crlFiles ?? [], raw.path + ["crls"], into: &findings) ?? []
        }
        switch raw.trust {
        case .pinned: contents.anchors = contents.pinned
        case .listed(let files, _): contents.anchors = certificates(files, raw.path + ["trust"], what: "anchor", into: &findings) ?? []
        case .system, .none: break
        }
        return (contents, findings)
    }

    /// The policy `raw` describes, with what its files hold; nil (and the errors) when a file
    /// is missing or unusable. `raw` must have passed `ConfigRules`.
    mutating func policy(_ raw: RawPolicy, defaultPorts: Set<UInt16>) -> (HostPolicy?, [Finding]) {
        var (contents, findings) = read(raw)
        var settings = HostPolicy.Settings(trust: .none, ports: raw.ports ?? defaultPorts)
        settings.action = raw.action
        settings.validateHost = raw.validateHost
        settings.pinKind = raw.pinKind
        settings.enforce = raw.enforce
        settings.requireWebPKIProfile = raw.requireWebPKIProfile
        settings.verifyCommand = contents.verifyCommand
        settings.expires = raw.expires?.written
        settings.pinsExpireAt = raw.expires?.end
        settings.includeSubdomains = raw.includeSubdomains
        settings.minTLS = raw.minTLS
        settings.mode = raw.mode
        settings.ct = raw.ct
        if let certificateFile = raw.clientCertificateFile, let keyFile = raw.clientKeyFile {
            settings.clientIdentity = clientIdentity(raw, certificateFile: certificateFile, keyFile: keyFile, into: &findings)
        }

        let pinned = contents.pinned
        settings.pinnedCertificates = pinned
        switch raw.revocation {
        case .off: settings.revocation = .off
        case .ocspStaple: settings.revocation = .ocspStaple
        case .crl: settings.revocation = .crl(contents.revocationLists)
        }
        let anchors = contents.anchors
        if raw.trust == .system, let store = system(raw.path, into: &findings) { settings.trust = .system(store) }
        guard !findings.hasErrors else { return (nil, findings) }
        do {
            switch raw.trust {
            case .pinned: settings.trust = .pinned(try TrustStore(anchors: anchors))
            case .listed(_, includingSystem: false): settings.trust = .anchors(try TrustStore(anchors: anchors), anchors)
            case .listed(_, includingSystem: true):
                guard let system = system(raw.path, into: &findings) else { return (nil, findings) }
                settings.trust = .systemAndListed(try system.adding(anchors), anchors)
            case .system, .none: break
            }
        } catch {
            return (nil, findings + [.error(raw.path + ["trust"], "\(raw.name): cannot build the trust store: \(error)")])
        }

        var unique: [Pin] = []
        unique.reserveCapacity(raw.pins.count + pinned.count)
        for pin in raw.pins where !unique.contains(pin) { unique.append(pin) }
        for certificate in pinned {
            let pin = Pin(digest: raw.pinKind == .certificate ? certificate.certificateSHA256 : certificate.publicKeySHA256)
            if !unique.contains(pin) { unique.append(pin) }
        }
        settings.pins = unique
        findings += warnings(settings, raw, anchors: anchors)
        do {
            return (try HostPolicy(settings), findings)
        } catch {
            return (nil, findings + [.error(raw.path, "\(raw.name): \(error)")])
        }
    }

    /// What the loaded files tell: a single pin, pinned certificates and anchors expiring soon.
    private func warnings(_ settings: HostPolicy.Settings, _ raw: RawPolicy, anchors: [Certificate]) -> [Finding] {
        var findings: [Finding] = []
        if settings.pinKind != .none && settings.pins.count == 1 {
            findings.append(.warning(raw.path, "\(raw.name) has a single pin and no backup: add the pin of a backup key so that a key change does not lock clients out"))
        }
        let checked = settings.pinnedCertificates.map { ($0, raw.path + ["certificates"], "pinned certificate") }
            + anchors.filter { !settings.pinnedCertificates.contains($0) }.map { ($0, raw.path + ["trust"], "anchor") }
        for (certificate, keyPath, what) in checked {
            let notAfter = certificate.notAfter
            if notAfter <= now {
                findings.append(.warning(keyPath, "\(raw.name): \(what) \(certificate.subject) expired on \(rfc3339(notAfter))"))
            } else if notAfter.timeIntervalSince(now) <= ConfigRules.warningWindow {
                findings.append(.warning(keyPath, "\(raw.name): \(what) \(certificate.subject) expires on \(rfc3339(notAfter)), within 30 days"))
            }
        }
        return findings
    }

    /// Whether `path` is a regular file this process may execute.
    static func isExecutableFile(_ path: String) -> Bool {
        var status = stat()
        return stat(path, &status) == 0 && status.st_mode & S_IFMT != S_IFDIR && FileManager.default.isExecutableFile(atPath: path)
    }

    /// `file` resolved against the config's directory.
    func resolve(_ file: String) -> String {
        file.hasPrefix("/") ? file : URL(fileURLWithPath: directory).appendingPathComponent(file).path
    }

    /// The system trust store, or an error at `keyPath`.
    func system(_ keyPath: [String], into findings: inout [Finding]) -> TrustStore? {
        switch systemStore() {
        case .success(let store):
            return store
        case .failure(let error):
            findings.append(.error(keyPath, "cannot load the system trust store: \(error)"))
            return nil
        }
    }

    /// Every certificate in the listed files and directories (each certificate file: PEM
    /// bundle or DER; in a directory, files ending .pem .crt .cer .der in any case, whatever
    /// bytes their names hold); nil when one cannot be used.
    mutating func certificates(_ files: [String], _ keyPath: [String], what: String, into findings: inout [Finding]) -> [Certificate]? {
        var result: [Certificate] = []
        var failed = false
        for file in files {
            let resolved = resolve(file)
            if let cached = certificateFiles[resolved] {
                result += cached
                continue
            }
            let path = FilePathBytes(resolved)
            guard let kind = path.kind else {
                findings.append(.error(keyPath, element: file, "\(what) \"\(file)\" does not exist (\(resolved))"))
                failed = true
                continue
            }
            var loaded: [Certificate] = []
            if kind == .directory {
                let names: [[UInt8]]
                do {
                    names = try path.directoryEntries().filter(Self.hasCertificateExtension)
                } catch {
                    findings.append(.error(keyPath, element: file, "\(what) directory \"\(file)\" \(error)"))
                    failed = true
                    continue
                }
                if names.isEmpty {
                    findings.append(.error(keyPath, element: file, "\(what) directory \"\(file)\" holds no .pem, .crt, .cer or .der file"))
                    failed = true
                    continue
                }
                for name in names {
                    do {
                        loaded += try Certificate.parseAll(path.appending(name).read(.certificates))
                    } catch {
                        findings.append(.error(keyPath, element: file, "\(what) \"\(file)/\(FilePathBytes.display(name))\" \(error)"))
                        failed = true
                    }
                }
            } else {
                do {
                    loaded = try Certificate.parseAll(path.read(.certificates))
                } catch {
                    findings.append(.error(keyPath, element: file, "\(what) \"\(file)\" \(error)"))
                    failed = true
                    continue
                }
            }
            certificateFiles[resolved] = loaded
            result += loaded
        }
        return failed ? nil : result
    }

    /// Whether a directory entry ends .pem .crt .cer or .der, in any case.
    static func hasCertificateExtension(_ name: [UInt8]) -> Bool {
        guard let dot = name.lastIndex(of: UInt8(ascii: ".")), dot > 0 else { return false }
        return certificateExtensions.contains(String(decoding: name[(dot + 1)...], as: UTF8.self).lowercased())
    }

    /// `client_certificate` (PEM: the certificate, then the chain sent with it) and `client_key`
    /// (unencrypted PEM, of mode 0600 or 0400, or under `$CREDENTIALS_DIRECTORY`, where systemd's
    /// `LoadCredential=` puts it); nil (and the errors) when they cannot be used.
    func clientIdentity(_ raw: RawPolicy, certificateFile: String, keyFile: String, into findings: inout [Finding]) -> TLSClientIdentity? {
        let certificatePath = resolve(certificateFile)
        let certificates: [Certificate]
        do {
            certificates = try Certificate.parseAll(FilePathBytes(certificatePath).read(.certificates))
        } catch let error as FileReadError where error == .missing {
            findings.append(.error(raw.path + ["client_certificate"], "\(raw.name): client_certificate \"\(certificateFile)\" does not exist (\(certificatePath))"))
            return nil
        } catch {
            findings.append(.error(raw.path + ["client_certificate"], "\(raw.name): client_certificate \"\(certificateFile)\" \(error)"))
            return nil
        }
        let keyPath = resolve(keyFile)
        if let problem = Self.keyFileProblem(keyPath) {
            findings.append(.error(raw.path + ["client_key"], "\(raw.name): client_key \"\(keyFile)\" \(problem)"))
            return nil
        }
        let key: PrivateKey
        do {
            key = try PrivateKey(pem: FilePathBytes(keyPath).read(.certificates))
        } catch {
            findings.append(.error(raw.path + ["client_key"], "\(raw.name): client_key \"\(keyFile)\" is not an unencrypted PEM private key (\(keyPath))"))
            return nil
        }
        guard let certificate = certificates.first, key.matches(certificate) else {
            findings.append(.error(raw.path + ["client_key"], "\(raw.name): client_key \"\(keyFile)\" is not the key of client_certificate \"\(certificateFile)\""))
            return nil
        }
        return TLSClientIdentity(certificate: certificate, chain: Array(certificates.dropFirst()), key: key)
    }

    /// Why the private key at `path` may not be used: it must be a file that only its owner may
    /// read (mode 0600 or 0400), unless systemd passed it (`$CREDENTIALS_DIRECTORY`).
    static func keyFileProblem(_ path: String, environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        var info = stat()
        guard stat(path, &info) == 0 else {
            return errno == ENOENT ? "does not exist (\(path))" : "cannot be read: \(String(cString: strerror(errno))) (\(path))"
        }
        guard info.st_mode & S_IFMT == S_IFREG else { return "is not a regular file (\(path))" }
        if let credentials = environment["CREDENTIALS_DIRECTORY"], !credentials.isEmpty,
           path.hasPrefix(credentials.hasSuffix("/") ? credentials : credentials + "/") {
            return nil
        }
        let mode = info.st_mode & 0o7777
        guard mode == 0o600 || mode == 0o400 else {
            let octal = String(mode, radix: 8)
            return "has mode \(String(repeating: "0", count: max(0, 4 - octal.count)) + octal): a private key must be readable by its owner only (chmod 600 \(path)), or come through systemd's LoadCredential="
        }
        return nil
    }

    /// Every CRL in the listed files; nil when one cannot be used.
    func revocationLists(_ files: [String], _ keyPath: [String], into findings: inout [Finding]) -> [RevocationList]? {
        var result: [RevocationList] = []
        var failed = false
        for file in files {
            let resolved = resolve(file)
            do {
                result += try RevocationList.parseAll(FilePathBytes(resolved).read(.crls))
            } catch let error as FileReadError where error == .missing {
                findings.append(.error(keyPath, element: file, "CRL file \"\(file)\" does not exist (\(resolved))"))
                failed = true
            } catch {
                findings.append(.error(keyPath, element: file, "CRL file \"\(file)\" \(error)"))
                failed = true
            }
        }
        return failed ? nil : result
    }
}
