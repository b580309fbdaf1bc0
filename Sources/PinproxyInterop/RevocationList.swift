import Glibc
import Foundation
import COpenSSL
import CPinproxyShims

/// A certificate revocation list: owns one OpenSSL `X509_CRL`.
public final class RevocationList: @unchecked Sendable {
    let handle: OpaquePointer

    init(taking handle: OpaquePointer) {
        self.handle = handle
    }

    deinit {
        X509_CRL_free(handle)
    }

    /// Parses a PEM bundle of CRLs or a single DER CRL.
    public static func parseAll(_ bytes: [UInt8]) throws -> [RevocationList] {
        if bytes.isPEM {
            var result: [RevocationList] = []
            try bytes.withUnsafeBytes { raw in
                guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else {
                    throw OpenSSLError.drain("BIO_new_mem_buf")
                }
                defer { BIO_free(bio) }
                while let crl = PEM_read_bio_X509_CRL(bio, nil, nil, nil) {
                    result.append(RevocationList(taking: crl))
                }
                let leftover = drainErrorQueue()
                if result.isEmpty { throw OpenSSLError(operation: "no PEM CRL found", messages: leftover) }
            }
            return result
        }
        let parsed: OpaquePointer? = bytes.withUnsafeBufferPointer { buffer in
            var cursor = buffer.baseAddress
            return d2i_X509_CRL(nil, &cursor, buffer.count)
        }
        guard let parsed else { throw OpenSSLError.drain("not a DER CRL") }
        return [RevocationList(taking: parsed)]
    }

    /// The issuer in RFC 2253 form.
    public var issuer: String {
        formatName(X509_CRL_get_issuer(handle))
    }

    /// When the next CRL is due; nil when the CRL gives none.
    public var nextUpdate: Date? { date(from: X509_CRL_get0_nextUpdate(handle)) }

    /// Whether the CRL carries the cRLNumber extension (RFC 5280 5.2.3: conforming issuers MUST).
    public var hasCRLNumber: Bool { X509_CRL_get_ext_by_NID(handle, NID_crl_number, -1) >= 0 }
}
