import Foundation
import PinproxyInterop
import PinproxyPolicy

extension ClientConnection {
    /// Step 5a: TCP connect to each checked address in turn, all of them within one
    /// `connect_timeout`. An address that is not the last gets at most half the time left, so
    /// one that never answers leaves time for the others. A reopened upstream (`opening`)
    /// goes to the one address the first upstream used.
    func connect(to addresses: [IPAddress], for destination: Destination, opening: Opening = .first) {
        let targets = addresses.map { SocketAddress(address: $0, port: destination.port) }
        let timeout = config.proxy.connectTimeout
        let timer = LoopTimer(loop: worker.loop, after: timeout) { [weak self] in self?.connectDeadlinePassed() }
        let connector = startConnect(to: targets, index: 0, timeLeft: timeout)
        enter(.connecting(destination, ConnectAttempt(addresses: targets, index: 0, connector: connector, failures: [], timedOut: false,
                                                      deadline: worker.loop.now + timeout, timer: timer), opening))
    }

    private func startConnect(to addresses: [SocketAddress], index: Int, timeLeft: TimeInterval) -> TCPConnector {
        let timeout = index == addresses.count - 1 ? timeLeft : timeLeft / 2
        return TCPConnector(loop: worker.loop, address: addresses[index], timeout: timeout) { [weak self] result in
            self?.connectFinished(index: index, result)
        }
    }

    private func connectFinished(index: Int, _ result: Result<Int32, TCPConnector.Failure>) {
        guard case .connecting(let destination, var attempt, let opening) = state, attempt.index == index else {
            if case .success(let socket) = result { closeSocket(socket) }
            return unexpected("a connect result")
        }
        let address = attempt.addresses[index]
        switch result {
        case .success(let socket):
            // Registered before its ClientHello goes out, so that a capture loop is recognised.
            let own = worker.shared.ownUpstreams?.register(socket)
            if destination.entry.policy.mode == .tunnel {
                return openPassThrough(socket: socket, address: address, for: destination, opening: opening, own: own)
            }
            return startUpstreamTLS(socket: socket, address: address, for: destination, opening: opening, own: own)
        case .failure(.timedOut):
            attempt.failures.append("\(address): timed out")
            attempt.timedOut = true
        case .failure(.failed(let why)):
            attempt.failures.append("\(address): \(why)")
        }
        let next = index + 1
        guard next < attempt.addresses.count else {
            let tried = attempt.addresses.map(\.description).joined(separator: ", ")
            if attempt.timedOut {
                return refuse(.upstreamTimeout, "connecting to \(destination) (\(tried)) timed out within \(formatSeconds(config.proxy.connectTimeout)): \(attempt.failures.joined(separator: "; "))")
            }
            return refuse(.upstreamUnreachable, "cannot connect to \(destination) (\(tried)): \(attempt.failures.joined(separator: "; "))")
        }
        attempt.index = next
        attempt.connector = startConnect(to: attempt.addresses, index: next, timeLeft: max(0, attempt.deadline - worker.loop.now))
        state = .connecting(destination, attempt, opening)
    }

    /// `connect_timeout` is over for all the addresses together.
    private func connectDeadlinePassed() {
        guard case .connecting(let destination, let attempt, _) = state else { return unexpected("the connect deadline") }
        let tried = attempt.addresses[...attempt.index].map(\.description).joined(separator: ", ")
        let untried = attempt.addresses.count - attempt.index - 1
        let rest = untried > 0 ? "; \(untried) more address(es) not tried" : ""
        refuse(.upstreamTimeout, "connecting to \(destination) (\(tried)) timed out after \(formatSeconds(config.proxy.connectTimeout))\(rest)")
    }
}
