import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy

extension ClientConnection {
    /// Connect: TCP connect to each checked address in turn, all of them within one
    /// `connect_timeout`, for the upstream of a CONNECT, or of a transparent client (`hello`,
    /// its ClientHello, whose ALPN offer the upstream gets).
    func connect(to addresses: [IPAddress], for destination: Destination, transparent hello: ClientHello? = nil) {
        let step = dial(addresses, port: destination.port)
        if let hello { return enter(.openingTransparent(destination, hello, step)) }
        enter(.opening(destination, step))
    }

    /// The first step of opening an upstream, first or reopened: connecting to `addresses` in
    /// turn. An address that is not the last gets at most half the time left, so one that
    /// never answers leaves time for the others.
    func dial(_ addresses: [IPAddress], port: UInt16) -> Dialing {
        let targets = addresses.map { SocketAddress(address: $0, port: port) }
        let timeout = config.proxy.connectTimeout
        let timer = io.timer(after: timeout, repeats: false) { [weak self] in self?.connectDeadlinePassed() }
        let connector = startConnect(to: targets, index: 0, timeLeft: timeout)
        return .connecting(ConnectAttempt(addresses: targets, index: 0, connector: connector, failures: [], timedOut: false,
                                          deadline: io.now + timeout, timer: timer))
    }

    private func startConnect(to addresses: [SocketAddress], index: Int, timeLeft: TimeInterval) -> IO.Dial {
        let timeout = index == addresses.count - 1 ? timeLeft : timeLeft / 2
        return io.connect(to: addresses[index], timeout: timeout) { [weak self] result in
            self?.connectFinished(index: index, result)
        }
    }

    private func connectFinished(index: Int, _ result: Result<Int32, TCPConnectFailure>) {
        guard let (destination, step) = dialing, case .connecting(var attempt) = step, attempt.index == index else {
            if case .success(let socket) = result { io.closeSocket(socket) }
            return unexpected("a connect result")
        }
        let address = attempt.addresses[index]
        switch result {
        case .success(let socket):
            // Registered before its ClientHello goes out, so that a capture loop is recognised.
            let own = io.ownUpstreams?.register(socket)
            if destination.entry.policy.mode == .tunnel {
                return openPassThrough(socket: socket, address: address, for: destination, own: own)
            }
            return startUpstreamTLS(socket: socket, address: address, for: destination, own: own)
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
        attempt.connector = startConnect(to: attempt.addresses, index: next, timeLeft: max(0, attempt.deadline - io.now))
        advance(.connecting(attempt))
    }

    /// `connect_timeout` is over for all the addresses together.
    private func connectDeadlinePassed() {
        guard let (destination, step) = dialing, case .connecting(let attempt) = step else { return unexpected("the connect deadline") }
        let tried = attempt.addresses[...attempt.index].map(\.description).joined(separator: ", ")
        let untried = attempt.addresses.count - attempt.index - 1
        let rest = untried > 0 ? "; \(untried) more address(es) not tried" : ""
        refuse(.upstreamTimeout, "connecting to \(destination) (\(tried)) timed out after \(formatSeconds(config.proxy.connectTimeout))\(rest)")
    }
}
