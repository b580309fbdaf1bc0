import Glibc
import Foundation
import CPinproxyShims
import COpenSSL
import CLibevent

/// Non-blocking name resolution with libevent's evdns: nameservers from resolv.conf and
/// /etc/hosts, read once when the resolver is created.
public final class DNSResolver {
    let handle: OpaquePointer

    init(loop: EventLoop) {
        guard let handle = evdns_base_new(loop.base, EVDNS_BASE_INITIALIZE_NAMESERVERS | EVDNS_BASE_NAMESERVERS_NO_DEFAULT) else {
            fatalError("evdns_base_new failed")
        }
        evdns_base_load_hosts(handle, nil)
        self.handle = handle
        loop._dnsBaseIfCreated = handle
    }

    /// Resolves `name` to its IPv4 and IPv6 addresses; `completion` runs once on the loop
    /// (possibly before this returns, for names answered from /etc/hosts), unless cancelled.
    @discardableResult
    public func resolve(_ name: String, completion: @escaping (Result<[IPAddress], DNSFailure>) -> Void) -> DNSRequest {
        let request = DNSRequest(completion: completion)
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_flags = EVUTIL_AI_ADDRCONFIG
        let context = Unmanaged.passRetained(request).toOpaque()
        let pending = evdns_getaddrinfo(handle, name, nil, &hints, { result, list, context in
            let request = Unmanaged<DNSRequest>.fromOpaque(context!).takeRetainedValue()
            defer { if let list { evutil_freeaddrinfo(list) } }
            request.pending = nil
            guard !request.cancelled else { return }
            guard result == 0 else {
                request.completion(.failure(DNSFailure(message: String(cString: evutil_gai_strerror(result)))))
                return
            }
            var addresses: [IPAddress] = []
            var cursor = list
            while let info = cursor {
                if let sockaddr = info.pointee.ai_addr, let address = SocketAddress(sockaddr)?.address, !addresses.contains(address) {
                    addresses.append(address)
                }
                cursor = info.pointee.ai_next
            }
            request.completion(addresses.isEmpty ? .failure(DNSFailure(message: "no address")) : .success(addresses))
        }, context)
        request.pending = pending
        return request
    }
}

/// Why a name did not resolve.
public struct DNSFailure: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}

/// An outstanding lookup; `cancel` guarantees its completion never runs.
public final class DNSRequest {
    fileprivate var pending: OpaquePointer?
    fileprivate var cancelled = false
    fileprivate let completion: (Result<[IPAddress], DNSFailure>) -> Void

    fileprivate init(completion: @escaping (Result<[IPAddress], DNSFailure>) -> Void) {
        self.completion = completion
    }

    /// Stops waiting for the answer.
    public func cancel() {
        cancelled = true
        if let pending {
            self.pending = nil
            evdns_getaddrinfo_cancel(pending)
        }
    }
}
