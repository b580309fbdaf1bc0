import Glibc
import FoundationEssentials
import CPinproxyShims
import COpenSSL
import CLibevent
import PinproxyCore

/// One non-blocking TCP connect with a timeout; the result arrives once on the loop.
public final class TCPConnector {
    public typealias Failure = TCPConnectFailure

    private var event: OpaquePointer?
    private var socket: Int32 = -1
    private var completion: ((Result<Int32, Failure>) -> Void)?
    /// Held so that the loop's base outlives this connector's event.
    private let loop: EventLoop

    /// Starts connecting to `address`. On success the completion receives the connected socket,
    /// which the caller then owns.
    public init(loop: EventLoop, address: SocketAddress, timeout: TimeInterval, completion: @escaping (Result<Int32, Failure>) -> Void) {
        self.completion = completion
        self.loop = loop
        let family = address.address.isIPv6 ? AF_INET6 : AF_INET
        socket = Glibc.socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard socket >= 0 else {
            finishLater(loop, .failure(.failed(String(cString: strerror(errno)))))
            return
        }
        setNoDelay(socket)
        let status = address.withSockaddr { Glibc.connect(socket, $0, $1) }
        if status != 0 && errno != EINPROGRESS {
            let message = String(cString: strerror(errno))
            Glibc.close(socket)
            socket = -1
            finishLater(loop, .failure(.failed(message)))
            return
        }
        let context = Unmanaged.passUnretained(self).toOpaque()
        event = event_new(loop.base, socket, Int16(EV_WRITE), { fd, what, context in
            guard let context else { return }
            let connector = Unmanaged<TCPConnector>.fromOpaque(context).takeUnretainedValue()
            connector.ready(timedOut: Int32(what) & Int32(EV_TIMEOUT) != 0)
        }, context)
        var tv = timeval(timeout)
        event_add(event, &tv)
    }

    private func finishLater(_ loop: EventLoop, _ result: Result<Int32, Failure>) {
        // Report on the next loop turn so the caller never sees a callback during init.
        let context = Unmanaged.passUnretained(self).toOpaque()
        pendingResult = result
        event = event_new(loop.base, -1, 0, { _, _, context in
            guard let context else { return }
            let connector = Unmanaged<TCPConnector>.fromOpaque(context).takeUnretainedValue()
            if let result = connector.pendingResult { connector.finish(result) }
        }, context)
        var tv = timeval(0)
        event_add(event, &tv)
    }

    private var pendingResult: Result<Int32, Failure>?

    private func ready(timedOut: Bool) {
        if timedOut {
            Glibc.close(socket)
            socket = -1
            finish(.failure(.timedOut))
            return
        }
        var error: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        getsockopt(socket, SOL_SOCKET, SO_ERROR, &error, &length)
        if error != 0 {
            Glibc.close(socket)
            socket = -1
            finish(.failure(.failed(String(cString: strerror(error)))))
            return
        }
        let connected = socket
        socket = -1
        finish(.success(connected))
    }

    private func finish(_ result: Result<Int32, Failure>) {
        let completion = self.completion
        cancel()
        completion?(result)
    }

    /// Abandons the attempt; the completion will not run.
    public func cancel() {
        completion = nil
        if let event {
            event_free(event)
            self.event = nil
        }
        if socket >= 0 {
            Glibc.close(socket)
            socket = -1
        }
    }

    deinit {
        cancel()
    }
}

/// Turns Nagle's algorithm off on a TCP socket: TLS sends small records (session tickets, the
/// end of a handshake) that must not wait for the peer's delayed ACK.
public func setNoDelay(_ socket: Int32) {
    var one: Int32 = 1
    setsockopt(socket, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
}
