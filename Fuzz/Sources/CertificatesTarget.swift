import PinproxyInterop
import PinproxyPolicy

/// Bytes through the certificate and CRL loaders (PEM bundles or single DER), then through
/// everything the daemon and `pinproxy pin` read from a parsed certificate.
enum CertificatesTarget {
    static func run(_ input: [UInt8]) {
        if let certificates = try? Certificate.parseAll(input) {
            for certificate in certificates {
                _ = (certificate.subject, certificate.issuer, certificate.notBefore, certificate.notAfter)
                _ = (certificate.serialNumber, certificate.subjectAlternativeNames, certificate.isSelfIssued)
                _ = (certificate.publicKeySHA256, certificate.certificateSHA256)
                _ = certificate.matchesHostName("api.test")
                _ = certificate.nameConstraintsPermit(dnsName: "api.test")
                // DER and PEM read back as the same certificate.
                let der = certificate.der
                fuzzCheck((try? Certificate(der: der)) == certificate, "DER does not read back")
                fuzzCheck((try? Certificate.parseAll(Array(certificate.pem.utf8))) == [certificate], "PEM does not read back")
            }
        }
        if let lists = try? RevocationList.parseAll(input) {
            for list in lists {
                _ = (list.issuer, list.nextUpdate)
            }
        }
    }
}
