import PinproxyCore
import Glibc
import PinproxyInterop
import PinproxyService

/// The egress lock's listeners (`transparent_listen`), opened once for every worker: each one
/// is either passed by the service manager (a socket named `transparent`, from
/// `pinproxy-transparent.socket`) or bound here, and never with `SO_REUSEPORT`, so that no other
/// socket can join it. The port is privileged (below `ip_unprivileged_port_start`): binding it
/// needs `CAP_NET_BIND_SERVICE`, which the daemon drops once every listener is bound.
struct TransparentListeners {
    /// The name pinproxy-transparent.socket gives its sockets (`FileDescriptorName=`).
    static let inheritedName = "transparent"

    /// The listening sockets, in `transparent_listen` order; the daemon owns them.
    let sockets: [(address: SocketAddress, fd: Int32)]
    /// IPv6 addresses left out because IPv6 is unavailable on this host, and why.
    let unavailable: [(address: SocketAddress, error: SystemError)]
    /// Sockets named `transparent` whose address `transparent_listen` does not list: not used.
    let unlisted: [(fd: Int32, address: SocketAddress?)]

    /// Takes the passed socket of each address in `addresses` from `inherited` (their bound
    /// addresses), binds the others with `bind`. An IPv6 address whose family is unavailable
    /// (`EAFNOSUPPORT`, `EADDRNOTAVAIL`) is left out when an IPv4 listener remains; any other
    /// failure closes what was bound and throws.
    /// Where `ipv6Available` is false, IPv6 addresses are not even tried (a privileged port
    /// answers EACCES before the family is looked at).
    static func open(_ addresses: [SocketAddress], inherited: [(fd: Int32, address: SocketAddress?)], ipv6Available: Bool = true,
                     bind: (SocketAddress) throws(SystemError) -> Int32) throws(ListenerError) -> TransparentListeners {
        var sockets: [(address: SocketAddress, fd: Int32)] = []
        var unavailable: [(address: SocketAddress, error: SystemError)] = []
        var passed = inherited
        let hasIPv4 = addresses.contains { !$0.address.isIPv6 }
        for address in addresses {
            if let index = passed.firstIndex(where: { $0.address == address }) {
                sockets.append((address, passed.remove(at: index).fd))
                continue
            }
            do throws(SystemError) {
                if address.address.isIPv6 && !ipv6Available { throw SystemError("bind", EADDRNOTAVAIL) }
                sockets.append((address, try bind(address)))
            } catch {
                if address.address.isIPv6, hasIPv4, ExclusiveListener.familyUnavailable(error) {
                    unavailable.append((address, error))
                    continue
                }
                for (_, fd) in sockets where !inherited.contains(where: { $0.fd == fd }) { closeSocket(fd) }
                throw ListenerError(message: Self.explain(address, error))
            }
        }
        return TransparentListeners(sockets: sockets, unavailable: unavailable, unlisted: passed)
    }

    private static func explain(_ address: SocketAddress, _ error: SystemError) -> String {
        var message = "cannot listen on \(address) (proxy.transparent_listen): \(error)"
        if error.code == EACCES {
            message += ". The transparent port is privileged (below net.ipv4.ip_unprivileged_port_start) so that no other user can take it: under systemd, pinproxy-transparent.socket binds it; otherwise run pinproxy with CAP_NET_BIND_SERVICE (e.g. setpriv --ambient-caps +net_bind_service) or as root"
        } else if error.code == EADDRINUSE {
            message += ": another process already listens there (another pinproxy?)"
        }
        return message
    }

    /// The sockets' inodes (what `/proc/net/tcp` lists): a listener on a transparent address
    /// with another inode is not pinproxy's.
    var inodes: Set<UInt64> { Set(sockets.compactMap { try? Descriptor.status(of: $0.fd).inode }) }
}
