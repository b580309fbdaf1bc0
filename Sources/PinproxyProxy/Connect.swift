import Foundation
import PinproxyInterop
import PinproxyPolicy

extension ClientConnection {
    /// Step 5a: TCP connect to each checked address in turn, each within `connect_timeout`.
    func connect(to addresses: [IPAddress]) {
        phase = .connecting
        destinations = addresses
        connectNext(index: 0, timedOut: false, lastError: "")
    }

    private func connectNext(index: Int, timedOut: Bool, lastError: String) {
        guard let (host, port) = target else { return }
        guard index < destinations.count else {
            let tried = destinations.map { SocketAddress(address: $0, port: port).description }.joined(separator: ", ")
            if timedOut {
                return refuse(.upstreamTimeout, "connecting to \(host):\(port) (\(tried)) timed out after \(formatSeconds(config.proxy.connectTimeout))")
            }
            return refuse(.upstreamUnreachable, "cannot connect to \(host):\(port) (\(tried)): \(lastError)")
        }
        let address = SocketAddress(address: destinations[index], port: port)
        connector = TCPConnector(loop: worker.loop, address: address, timeout: config.proxy.connectTimeout) { [weak self] result in
            guard let self, self.phase == .connecting else { return }
            self.connector = nil
            switch result {
            case .success(let socket):
                self.upstreamAddress = address
                self.startUpstreamTLS(socket: socket)
            case .failure(.timedOut):
                self.connectNext(index: index + 1, timedOut: true, lastError: "timed out")
            case .failure(.failed(let why)):
                self.connectNext(index: index + 1, timedOut: timedOut, lastError: "\(address): \(why)")
            }
        }
    }
}
