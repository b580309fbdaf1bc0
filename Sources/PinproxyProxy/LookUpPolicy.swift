import Foundation
import PinproxyPolicy

extension ClientConnection {
    /// Step 3: the entry for the host; client-denied (first), host-denied and port-denied are
    /// decided here, before any network activity.
    func lookUpPolicy(_ target: RequestTarget, client: ClientDecision) {
        let destination = Destination(host: target.host, port: target.port, entry: config.policies.lookup(target.host),
                                      context: config.verdictContext, client: client)
        if client.outcome == .refuse { return refuse(.clientDenied, client.detail, for: destination) }
        if let verdict = TrustEvaluator.evaluateRequest(port: target.port, entry: destination.entry), !verdict.allowsConnection {
            return refuse(verdict: verdict, for: destination)
        }
        resolve(destination)
    }
}
