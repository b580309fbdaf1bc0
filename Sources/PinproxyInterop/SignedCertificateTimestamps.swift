import Glibc
import FoundationEssentials
import PinproxyCore
import COpenSSL
import CPinproxyShims

/// OpenSSL's store of Certificate Transparency log keys (`CTLOG_STORE`), built from keys the
/// caller read. OpenSSL loads a store only from its own file format, so the keys are written
/// in it to an anonymous memory file (`memfd`) and loaded from there; nothing touches the disk.
public final class CTLogStore: @unchecked Sendable {
    /// The owned `CTLOG_STORE *`; read-only once built, so shared by every thread.
    let handle: OpaquePointer

    /// A store of `keys` (each a DER SubjectPublicKeyInfo). OpenSSL names a log by the
    /// SHA-256 of its key, as SCTs do.
    public init(keys: [[UInt8]]) throws {
        guard let store = CTLOG_STORE_new() else { throw OpenSSLError.drain("CTLOG_STORE_new") }
        var text = "enabled_logs = " + keys.indices.map { "log\($0)" }.joined(separator: ",") + "\n"
        for (index, key) in keys.enumerated() {
            // Foundation's base64 only emits A-Z a-z 0-9 + / =: nothing the CONF syntax reads otherwise.
            text += "[log\(index)]\ndescription = log \(index)\nkey = \(Data(key).base64EncodedString())\n"
        }
        let descriptor = pp_memfd_create_cloexec("pinproxy-ct-logs")
        guard descriptor >= 0 else {
            CTLOG_STORE_free(store)
            throw OpenSSLError(operation: "memfd_create for the CT log store: \(String(cString: strerror(errno)))", messages: [])
        }
        defer { close(descriptor) }
        let bytes = Array(text.utf8)
        var written = 0
        while written < bytes.count {
            let count = bytes[written...].withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else {
                CTLOG_STORE_free(store)
                throw OpenSSLError(operation: "writing the CT log store: \(String(cString: strerror(errno)))", messages: [])
            }
            written += count
        }
        guard CTLOG_STORE_load_file(store, "/proc/self/fd/\(descriptor)") == 1 else {
            CTLOG_STORE_free(store)
            throw OpenSSLError.drain("loading the CT log keys (a key is not a public key OpenSSL reads)")
        }
        handle = store
    }

    deinit {
        CTLOG_STORE_free(handle)
    }
}

/// Reads Signed Certificate Timestamps from where they travel, and has OpenSSL validate them
/// (`SCT_validate`): each SCT's log must be in the store, and its signature must hold over the
/// leaf (or, for an embedded SCT, the precertificate made from the leaf and its issuer's key)
/// at the time given. Which SCTs count is Policy's question (`CTPolicy`).
public enum SignedCertificateTimestamps {
    /// The SCTs embedded in `leaf` (its SCT list extension), as their own bytes.
    public static func embedded(in leaf: Certificate) -> [[UInt8]] {
        defer { _ = drainErrorQueue() }
        guard let raw = X509_get_ext_d2i(leaf.handle, NID_ct_precert_scts, nil, nil) else { return [] }
        let stack = OpaquePointer(raw)
        defer { SCT_LIST_free(stack) }
        return serialized(stack)
    }

    /// The SCTs carried by the single responses of the OCSP response `der`, as OpenSSL reads
    /// them in a handshake (whichever certificate each answers for: the signature check ties
    /// an SCT to the leaf).
    public static func inOCSPResponse(_ der: [UInt8]) -> [[UInt8]] {
        defer { _ = drainErrorQueue() }
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor = buffer.baseAddress
            return d2i_OCSP_RESPONSE(nil, &cursor, buffer.count)
        }
        guard let response = parsed else { return [] }
        defer { OCSP_RESPONSE_free(response) }
        guard let basic = OCSP_response_get1_basic(response) else { return [] }
        defer { OCSP_BASICRESP_free(basic) }
        var found: [[UInt8]] = []
        for index in 0..<max(0, OCSP_resp_count(basic)) {
            guard let single = OCSP_resp_get0(basic, index),
                  let raw = OCSP_SINGLERESP_get1_ext_d2i(single, NID_ct_cert_scts, nil, nil) else { continue }
            let stack = OpaquePointer(raw)
            found += serialized(stack)
            SCT_LIST_free(stack)
        }
        return found
    }

    /// Validates each SCT against `leaf`, issued by `issuer`, with the logs of `store`, at
    /// `time`. An SCT OpenSSL cannot parse is left out.
    public static func validate(_ scts: [DeliveredSCT], leaf: Certificate, issuer: Certificate,
                                store: CTLogStore, at time: Date) -> [SCTObservation] {
        defer { _ = drainErrorQueue() }
        guard !scts.isEmpty, let context = CT_POLICY_EVAL_CTX_new() else { return [] }
        defer { CT_POLICY_EVAL_CTX_free(context) }
        guard CT_POLICY_EVAL_CTX_set1_cert(context, leaf.handle) == 1, CT_POLICY_EVAL_CTX_set1_issuer(context, issuer.handle) == 1 else { return [] }
        CT_POLICY_EVAL_CTX_set_shared_CTLOG_STORE(context, store.handle)
        CT_POLICY_EVAL_CTX_set_time(context, UInt64(max(0, time.timeIntervalSince1970 * 1000)))
        var observations: [SCTObservation] = []
        for delivered in scts {
            let source = delivered.source
            let parsed: OpaquePointer? = delivered.bytes.withUnsafeBufferPointer { buffer in
                var cursor = buffer.baseAddress
                return o2i_SCT(nil, &cursor, buffer.count)
            }
            guard let sct = parsed else { continue }
            defer { SCT_free(sct) }
            let openSSLSource: sct_source_t = switch source {
            case .embedded: SCT_SOURCE_X509V3_EXTENSION
            case .tlsExtension: SCT_SOURCE_TLS_EXTENSION
            case .ocsp: SCT_SOURCE_OCSP_STAPLED_RESPONSE
            }
            guard SCT_set_source(sct, openSSLSource) == 1 else { continue }
            _ = SCT_validate(sct, context)
            let signature: SCTObservation.Signature = switch SCT_get_validation_status(sct) {
            case SCT_VALIDATION_STATUS_VALID: .valid
            case SCT_VALIDATION_STATUS_UNKNOWN_LOG: .unknownLog
            case SCT_VALIDATION_STATUS_UNKNOWN_VERSION: .unknownVersion
            default: .invalid
            }
            var id: UnsafeMutablePointer<UInt8>?
            let idLength = SCT_get0_log_id(sct, &id)
            let logID = id.map { Array(UnsafeBufferPointer(start: $0, count: Int(idLength))) } ?? []
            let timestamp = Date(timeIntervalSince1970: TimeInterval(SCT_get_timestamp(sct)) / 1000)
            observations.append(SCTObservation(logID: logID, timestamp: timestamp, source: source, signature: signature))
        }
        return observations
    }

    /// The SCTs of a `SignedCertificateTimestampList` in its TLS encoding (what the TLS
    /// extension carries); nil when OpenSSL cannot read it.
    public static func list(tlsEncoded bytes: [UInt8]) -> [[UInt8]]? {
        defer { _ = drainErrorQueue() }
        let parsed: OpaquePointer? = bytes.withUnsafeBufferPointer { buffer in
            var cursor = buffer.baseAddress
            return o2i_SCT_LIST(nil, &cursor, buffer.count)
        }
        guard let stack = parsed else { return nil }
        defer { SCT_LIST_free(stack) }
        return serialized(stack)
    }

    /// Each SCT of `stack` in its TLS encoding (`SerializedSCT`).
    static func serialized(_ stack: OpaquePointer) -> [[UInt8]] {
        var result: [[UInt8]] = []
        for index in 0..<pp_sk_SCT_num(stack) {
            guard let sct = pp_sk_SCT_value(stack, index) else { continue }
            var out: UnsafeMutablePointer<UInt8>?
            let length = i2o_SCT(sct, &out)
            guard length > 0, let out else { continue }
            result.append(Array(UnsafeBufferPointer(start: out, count: Int(length))))
            pp_OPENSSL_free(out)
        }
        return result
    }

    /// The SCTs `ssl`'s handshake delivered in the TLS extension (those of the certificate and
    /// the staple are read from them directly).
    static func tlsExtension(of ssl: OpaquePointer) -> [[UInt8]] {
        defer { _ = drainErrorQueue() }
        guard let stack = SSL_get0_peer_scts(ssl) else { return [] }
        var result: [[UInt8]] = []
        for index in 0..<pp_sk_SCT_num(stack) {
            guard let sct = pp_sk_SCT_value(stack, index), SCT_get_source(sct) == SCT_SOURCE_TLS_EXTENSION else { continue }
            var out: UnsafeMutablePointer<UInt8>?
            let length = i2o_SCT(sct, &out)
            guard length > 0, let out else { continue }
            result.append(Array(UnsafeBufferPointer(start: out, count: Int(length))))
            pp_OPENSSL_free(out)
        }
        return result
    }
}
