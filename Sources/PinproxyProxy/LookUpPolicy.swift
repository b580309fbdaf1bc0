import Foundation
import PinproxyPolicy

extension ClientConnection {
    /// Step 3: the entry for the host; host-denied and port-denied are decided here, before
    /// any network activity.
    func lookUpPolicy(host: TargetHost, port: UInt16) {
        let destination = Destination(host: host, port: port, entry: config.policies.lookup(host), context: config.verdictContext)
        if let verdict = TrustEvaluator.evaluateRequest(port: port, entry: destination.entry), !verdict.allowsConnection {
            return refuse(verdict: verdict, for: destination)
        }
        resolve(destination)
    }
}
