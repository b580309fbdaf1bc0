/// The addresses of an accepted connection as the kernel knows them: where it was accepted
/// (`local`), and where the client was sending it before netfilter (an nftables `redirect`)
/// turned it to this listener (`original`, from conntrack). Interop reads them from a socket.
public struct ConnectionAddresses: Sendable {
    /// The listener's address the connection arrived at.
    public let local: SocketAddress?
    /// The destination the client connected to, or why the kernel gave none (no conntrack
    /// entry: the connection was not redirected and conntrack does not track it).
    public let original: Result<SocketAddress, SystemError>

    public init(local: SocketAddress?, original: Result<SocketAddress, SystemError>) {
        self.local = local
        self.original = original
    }
}
