import Foundation
import PinproxyPolicy

extension ClientConnection {
    /// Step 3: the entry for the host; host-denied and port-denied are decided here, before
    /// any network activity.
    func lookUpPolicy() {
        guard let (host, port) = target else { return }
        let entry = config.policies.lookup(host)
        self.entry = entry
        let verdict = TrustEvaluator.evaluateRequest(port: port, entry: entry)
        if let verdict, !verdict.allowsConnection {
            return refuse(verdict: verdict)
        }
        resolve()
    }
}
