import Glibc
import FoundationEssentials
import CPinproxyShims
import COpenSSL
import CLibevent
import PinproxyCore

/// A listening TCP socket on a loop (libevent evconnlistener). Accepted sockets arrive
/// non-blocking and close-on-exec.
public final class Listener {
    private var handle: OpaquePointer?
    private let onAccept: (Int32, SocketAddress?) -> Void
    private let loop: EventLoop
    private var pause: Timer?
    /// Told why accepting failed (out of file descriptors, say); accepting pauses for
    /// `pauseAfterError` seconds instead of spinning on the error.
    public var onError: ((String) -> Void)?

    /// How long accepting pauses after an error.
    public static let pauseAfterError: TimeInterval = 1

    /// Binds `address` with SO_REUSEADDR and SO_REUSEPORT, so that every loop can have its own
    /// listener on the same address and the kernel spreads connections across them.
    public init(loop: EventLoop, address: SocketAddress, onAccept: @escaping (Int32, SocketAddress?) -> Void) throws {
        self.onAccept = onAccept
        self.loop = loop
        let flags = UInt32(LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_REUSEABLE_PORT | LEV_OPT_CLOSE_ON_EXEC)
        let context = Unmanaged.passUnretained(self).toOpaque()
        handle = address.withSockaddr { sockaddr, length in
            evconnlistener_new_bind(loop.base, Listener.callback, context, flags, 1024, sockaddr, Int32(length))
        }
        guard handle != nil else {
            throw ListenerError(message: "cannot listen on \(address): \(String(cString: strerror(errno)))")
        }
        evconnlistener_set_error_cb(handle, Listener.errorCallback)
    }

    /// Accepts on a duplicate of an already listening socket (socket activation), so that every
    /// loop can accept on it; the caller keeps, and eventually closes, `socket` itself.
    public init(loop: EventLoop, listeningSocket socket: Int32, onAccept: @escaping (Int32, SocketAddress?) -> Void) throws {
        self.onAccept = onAccept
        self.loop = loop
        let copy = fcntl(socket, F_DUPFD_CLOEXEC, 0)
        guard copy >= 0 else {
            throw ListenerError(message: "cannot duplicate inherited socket \(socket): \(String(cString: strerror(errno)))")
        }
        evutil_make_socket_nonblocking(copy)
        let flags = UInt32(LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC)
        let context = Unmanaged.passUnretained(self).toOpaque()
        handle = evconnlistener_new(loop.base, Listener.callback, context, flags, 0, copy)
        guard handle != nil else {
            Glibc.close(copy)
            throw ListenerError(message: "cannot accept on inherited socket \(socket): \(String(cString: strerror(errno)))")
        }
        evconnlistener_set_error_cb(handle, Listener.errorCallback)
    }

    private static let callback: evconnlistener_cb = { _, fd, sockaddr, _, context in
        guard let context else { return closeSocket(fd) }
        let listener = Unmanaged<Listener>.fromOpaque(context).takeUnretainedValue()
        listener.onAccept(fd, sockaddr.flatMap { SocketAddress(UnsafePointer($0)) })
    }

    private static let errorCallback: evconnlistener_errorcb = { listener, context in
        let code = errno
        guard let context else { return }
        Unmanaged<Listener>.fromOpaque(context).takeUnretainedValue().acceptFailed(String(cString: strerror(code)))
    }

    private func acceptFailed(_ reason: String) {
        guard let handle else { return }
        evconnlistener_disable(handle)
        onError?(reason)
        pause = Timer(loop: loop, after: Self.pauseAfterError) { [weak self] in
            guard let self, let handle = self.handle else { return }
            evconnlistener_enable(handle)
        }
    }

    /// The address the socket is bound to.
    public var localAddress: SocketAddress? {
        guard let handle else { return nil }
        return SocketAddress.local(of: evconnlistener_get_fd(handle))
    }

    /// The inode of the listening socket, as /proc/net/tcp lists it.
    public var socketInode: UInt64? {
        guard let handle else { return nil }
        var info = stat()
        guard fstat(evconnlistener_get_fd(handle), &info) == 0 else { return nil }
        return UInt64(info.st_ino)
    }

    /// Stops accepting and closes the socket.
    public func close() {
        pause = nil
        if let handle {
            evconnlistener_free(handle)
            self.handle = nil
        }
    }

    deinit {
        close()
    }
}

/// Closes a socket descriptor that no object owns yet.
public func closeSocket(_ fd: Int32) {
    _ = Glibc.close(fd)
}

/// The TCP sockets listening in this network namespace, as /proc/net/tcp and /proc/net/tcp6
/// list them. SO_REUSEPORT lets another process of the same user bind an address pinproxy
/// listens on, and the kernel would then split connections between the two: the daemon
/// looks here for listeners that are not its own.
public enum ListeningSockets {
    /// The inodes of the sockets listening on `address`'s port at that address, or at a
    /// wildcard address that covers it (or, for a wildcard `address`, at any address).
    public static func inodes(overlapping address: SocketAddress) -> Set<UInt64> {
        var found = Set<UInt64>()
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            guard let text = ProcFile.readText(table) else { continue }
            found.formUnion(ProcNetTCP.listeningInodes(in: text, overlapping: address))
        }
        return found
    }
}
