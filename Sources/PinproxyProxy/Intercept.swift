import Foundation
import Logging
import PinproxyInterop
import PinproxyPolicy
import PinproxyService

extension ClientConnection {
    /// Steps 7–8 (allowed): log the decision, answer 200, then read the client's ClientHello
    /// (`NegotiateProtocol.swift`) to settle the protocol before answering it.
    func intercept() {
        guard let verdict else { return }
        teardownPhase()
        logAdmission(note: nil)
        phase = .clientHandshake
        sendConnectionEstablished(verdict: verdict)
        phaseTimer = Timer(loop: worker.loop, after: config.proxy.handshakeTimeout) { [weak self] in
            self?.logEvent(.warning, "client-handshake-failed", detail: "the client did not finish its TLS handshake in time")
            self?.close()
        }
        readClientHello()
    }

    /// The decision line (and metrics) of an admitted upstream; `note` says why it is not the first.
    func logAdmission(note: String?) {
        guard let verdict else { return }
        let outcome = verdict.outcome == .allow ? "allowed" : "report-only"
        var detail = ([note].compactMap { $0 } + verdict.notes + (resumed ? ["upstream TLS session resumed"] : [])).joined(separator: "; ")
        if case .reportOnly = verdict.outcome {
            detail = ([note].compactMap { $0 } + ["would refuse: " + verdict.failures.map(\.description).joined(separator: "; ")]).joined(separator: "; ")
        }
        logDecision(outcome: outcome, reason: verdict.reason, status: 200, detail: detail, verdict: verdict)
        guard note == nil else { return }
        if let reason = verdict.reason {
            worker.shared.metrics.connection(outcome: .wouldRefuse, reason: reason)
            worker.shared.metrics.refusal(hostPattern: ProxyMetrics.patternLabel(for: verdict.entry), reason: reason, reportOnly: true)
        } else {
            worker.shared.metrics.connection(outcome: .allowed, reason: nil)
        }
    }

    /// Step 8c: terminate the client's TLS with a leaf for the CONNECT host minted by the local
    /// CA, selecting the protocol the upstream negotiated. A client whose SNI names another
    /// host fails the handshake (unrecognized_name): not a byte is relayed.
    func acceptClientTLS() {
        guard let (host, _) = target else { return close() }
        phase = .clientHandshake
        clientHelloReader = nil
        let tls: BufferEvent
        do {
            let leaf = try worker.shared.localCA.leaf(for: host)
            tls = try clientSide.acceptTLS(loop: worker.loop, context: worker.shared.interceptTLS, certificate: leaf.certificate,
                                           key: leaf.key, serverName: host.serverName, applicationProtocol: upstreamProtocol,
                                           bufferLimit: config.proxy.relayBufferBytes)
        } catch {
            logEvent(.error, "intercept-failed", detail: "cannot mint or install a certificate for \(host): \(error)")
            return close()
        }
        clientSide = tls
        if phaseTimer == nil {
            // After a reopened upstream: the client's handshake gets a full timeout again.
            phaseTimer = Timer(loop: worker.loop, after: config.proxy.handshakeTimeout) { [weak self] in
                self?.logEvent(.warning, "client-handshake-failed", detail: "the client did not finish its TLS handshake in time")
                self?.close()
            }
        }
        tls.onEvent = { [weak self] events in
            guard let self, self.phase == .clientHandshake else { return }
            self.phaseTimer = nil
            guard events.contains(.connected) else {
                let failure = tls.takeTLSErrors()
                if let sni = tls.requestedServerName, host.serverName != nil, TargetHost(sni) != host {
                    self.logEvent(.warning, "sni-mismatch", detail: "the client's SNI \(sni) differs from the CONNECT host \(host): refused in the handshake")
                } else {
                    self.logEvent(.warning, "client-handshake-failed", detail: "\(failure) (does the client trust the pinproxy CA? see `pinproxy ca`)")
                }
                return self.close()
            }
            self.relay()
        }
    }

    /// A line about this connection that is not its decision.
    func logEvent(_ level: Logger.Level, _ event: String, detail: String) {
        var fields: [(AccessLog.Field, String)] = [(.client, client?.description ?? "-")]
        if let (host, port) = target { fields += [(.host, host.description), (.port, String(port))] }
        fields.append((.detail, detail))
        worker.shared.log.emit(level, event, fields)
    }
}
