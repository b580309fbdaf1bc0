import Foundation
import PinproxyInterop
import PinproxyPolicy

extension ClientConnection {
    /// Step 2b: who the client is, when the config has `[clients]` (`ClientIdentifier`): its
    /// socket's owner at once, then, off the loop within `client_identity_timeout`, what can
    /// block. Nothing the client sent takes part. Without `[clients]`, nothing is looked up.
    func identifyClient(_ target: RequestTarget) {
        guard !config.clients.isEmpty else { return lookUpPolicy(target, client: .notApplied) }
        let timeout = config.proxy.clientIdentityTimeout
        let start = worker.identifier.start(peer: client, ourEnd: ourEnd, needsExecutable: config.clients.needsExecutable,
                                            deadline: ProcessLimits.monotonicSeconds() + timeout, on: worker.loop,
                                            metrics: worker.shared.metrics) { [weak self] parts in self?.identityLookedUp(parts) }
        switch start {
        case .known(let identity):
            decideForClient(target, identity)
        case .pending(let pending):
            let timer = LoopTimer(loop: worker.loop, after: timeout) { [weak self] in self?.identityTimedOut() }
            enter(.identifying(target, pending, timer: timer))
        }
    }

    private func identityLookedUp(_ parts: IdentityLookups.Parts) {
        // The client may have left (or the deadline passed) meanwhile: then nothing waits for it.
        guard case .identifying(let target, let pending, _) = state else { return }
        decideForClient(target, pending.identity(with: parts))
    }

    private func identityTimedOut() {
        guard case .identifying(let target, let pending, _) = state else { return unexpected("the client identity timer") }
        decideForClient(target, pending.identityWithoutLookups)
    }

    private func decideForClient(_ target: RequestTarget, _ identity: ClientIdentity) {
        lookUpPolicy(target, client: ClientPolicy.decide(host: target.host, identity: identity, rules: config.clients))
    }
}
