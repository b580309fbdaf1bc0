import Glibc
import FoundationEssentials
import COpenSSL
import CPinproxyShims
import PinproxyCore

/// A certificate revocation list: owns one OpenSSL `X509_CRL`.
public final class RevocationList: @unchecked Sendable {
    let handle: OpaquePointer
    /// SHA-256 of the DER encoding: the CRL's identity in `VerifiedChains`.
    public let sha256: [UInt8]

    init(taking handle: OpaquePointer) {
        self.handle = handle
        var der: UnsafeMutablePointer<UInt8>?
        let length = i2d_X509_CRL(handle, &der)
        if length > 0, let der {
            sha256 = SHA256.hash(Array(UnsafeBufferPointer(start: der, count: Int(length))))
            pp_OPENSSL_free(der)
        } else {
            // Not a digest, and unique to this object: its chains are never confused with others'.
            sha256 = Array(UUID().uuidString.utf8)
        }
    }

    deinit {
        X509_CRL_free(handle)
    }

    /// Parses a PEM bundle of CRLs or a single DER CRL. Nothing is skipped: a block that is
    /// malformed, of another type or not a CRL, or bytes after a DER CRL, is an error naming it.
    public static func parseAll(_ bytes: [UInt8]) throws(X509ParseError) -> [RevocationList] {
        guard bytes.isPEM else {
            guard let list = RevocationList(der: bytes) else { throw X509ParseError(description: "holds no PEM or DER CRL") }
            return [list]
        }
        var result: [RevocationList] = []
        for block in try PEMBlocks.read(bytes, types: ["X509 CRL"], what: "CRL") {
            guard let list = RevocationList(der: block.der) else { throw PEMBlocks.invalid(block, "CRL") }
            result.append(list)
        }
        return result
    }

    /// Parses exactly one DER CRL; nil when the bytes are not one, or hold more.
    convenience init?(der: [UInt8]) {
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor = buffer.baseAddress
            let crl = d2i_X509_CRL(nil, &cursor, buffer.count)
            if let crl, cursor != buffer.baseAddress.map({ $0 + buffer.count }) {
                X509_CRL_free(crl)
                return nil
            }
            return crl
        }
        _ = drainErrorQueue()
        guard let parsed else { return nil }
        self.init(taking: parsed)
    }

    /// The issuer in RFC 2253 form.
    public var issuer: String {
        formatName(X509_CRL_get_issuer(handle))
    }

    /// When the next CRL is due; nil when the CRL gives none.
    public var nextUpdate: Date? { date(from: X509_CRL_get0_nextUpdate(handle)) }

    /// When the CRL was issued (its thisUpdate).
    public var lastUpdate: Date? { date(from: X509_CRL_get0_lastUpdate(handle)) }

    /// Whether the CRL carries the cRLNumber extension (RFC 5280 5.2.3: conforming issuers MUST).
    public var hasCRLNumber: Bool { X509_CRL_get_ext_by_NID(handle, NID_crl_number, -1) >= 0 }
}
