/// The RFC 9209 Proxy Error Types pinproxy's refusals name in `Proxy-Status: pinproxy;
/// error=<type>`: the registry's tokens, spelled as it spells them.
public enum ProxyStatusError: String, Sendable, CaseIterable {
    case dnsTimeout = "dns_timeout"
    case dnsError = "dns_error"
    case destinationIPProhibited = "destination_ip_prohibited"
    case destinationUnavailable = "destination_unavailable"
    case connectionTimeout = "connection_timeout"
    case tlsProtocolError = "tls_protocol_error"
    case tlsCertificateError = "tls_certificate_error"
    case httpRequestError = "http_request_error"
    case httpRequestDenied = "http_request_denied"
    case proxyLoopDetected = "proxy_loop_detected"
}
