import Glibc
import FoundationEssentials
import CPinproxyShims
import COpenSSL
import CLibevent
import PinproxyCore

/// Non-blocking name resolution with libevent's evdns: nameservers from resolv.conf and
/// /etc/hosts, read once when the resolver is created.
///
/// The resolver owns every lookup libevent has not answered yet (evdns only holds an unretained
/// pointer to it), so freeing the resolver with its loop releases them all, and no callback can
/// reach a lookup that is gone.
public final class DNSResolver {
    let handle: OpaquePointer
    private unowned let loop: EventLoop
    private var outstanding: [ObjectIdentifier: DNSRequest] = [:]
    /// Set while the loop frees the resolver: no completion runs any more.
    fileprivate var isClosing = false

    /// The resolver of `loop` (one per loop, which frees it); reads resolv.conf and /etc/hosts
    /// now. Throws when libevent cannot make it.
    public init(loop: EventLoop) throws {
        errno = 0
        guard let handle = evdns_base_new(loop.base, EVDNS_BASE_INITIALIZE_NAMESERVERS | EVDNS_BASE_NAMESERVERS_NO_DEFAULT) else {
            throw SystemError("evdns_base_new", errno == 0 ? ENOMEM : errno)
        }
        evdns_base_load_hosts(handle, nil)
        self.handle = handle
        self.loop = loop
        loop.dnsIfCreated = self
    }

    /// Called by the loop as it goes away: fails every pending lookup (its callback, if libevent
    /// runs it, calls no completion) and releases them all.
    func close() {
        isClosing = true
        evdns_base_free(handle, 1)
        for request in outstanding.values { request.pending = nil }  // freed with the base
        outstanding.removeAll()
    }

    /// Resolves `name` to its IPv4 and IPv6 addresses; `completion` runs once on the loop,
    /// never before this returns (an answer from /etc/hosts waits for the loop's next pass),
    /// unless cancelled.
    @discardableResult
    public func resolve(_ name: String, completion: @escaping (Result<[IPAddress], DNSFailure>) -> Void) -> DNSRequest {
        let request = DNSRequest(completion: completion)
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_flags = EVUTIL_AI_ADDRCONFIG
        request.resolver = self
        outstanding[ObjectIdentifier(request)] = request
        let context = Unmanaged.passUnretained(request).toOpaque()
        request.starting = true
        defer { request.started(on: loop) }
        let pending = evdns_getaddrinfo(handle, name, nil, &hints, { result, list, context in
            // Alive: the resolver holds it until this, its one callback (also after `cancel`).
            defer { if let list { evutil_freeaddrinfo(list) } }
            guard let context else { return }
            let request = Unmanaged<DNSRequest>.fromOpaque(context).takeUnretainedValue()
            request.pending = nil
            let resolver = request.resolver
            resolver?.outstanding[ObjectIdentifier(request)] = nil
            // Cancelled by `cancel`, or failed as the loop frees the resolver: no completion.
            guard !request.cancelled, result != EVUTIL_EAI_CANCEL, resolver?.isClosing == false else { return }
            guard result == 0 else {
                request.deliver(.failure(DNSFailure(message: String(cString: evutil_gai_strerror(result)))))
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
            request.deliver(addresses.isEmpty ? .failure(DNSFailure(message: "no address")) : .success(addresses))
        }, context)
        request.pending = pending
        return request
    }
}

/// An outstanding lookup; `cancel` guarantees its completion never runs.
public final class DNSRequest {
    fileprivate weak var resolver: DNSResolver?
    fileprivate var pending: OpaquePointer?
    fileprivate var cancelled = false
    fileprivate var completion: ((Result<[IPAddress], DNSFailure>) -> Void)?
    /// While `resolve` runs: an answer that arrives then is held for the loop's next pass.
    fileprivate var starting = false
    private var early: Result<[IPAddress], DNSFailure>?
    private var delivery: Timer?

    fileprivate init(completion: @escaping (Result<[IPAddress], DNSFailure>) -> Void) {
        self.completion = completion
    }

    fileprivate func deliver(_ result: Result<[IPAddress], DNSFailure>) {
        if starting { early = result } else { finish(result) }
    }

    fileprivate func started(on loop: EventLoop) {
        starting = false
        guard let result = early else { return }
        early = nil
        // The timer holds this request until it fires or `cancel` drops it.
        delivery = Timer(loop: loop, after: 0) { [self] in finish(result) }
    }

    private func finish(_ result: Result<[IPAddress], DNSFailure>) {
        let completion = self.completion
        self.completion = nil
        delivery = nil
        guard !cancelled else { return }
        completion?(result)
    }

    /// Stops waiting for the answer.
    public func cancel() {
        cancelled = true
        completion = nil
        delivery = nil
        if let pending {
            self.pending = nil
            evdns_getaddrinfo_cancel(pending)
        }
    }
}
