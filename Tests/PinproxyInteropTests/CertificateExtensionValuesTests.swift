import COpenSSL
import PinproxyCore
import PinproxyInterop
import XCTest

/// PinproxyCore spells the keyUsage and extendedKeyUsage bits as numbers (it sees no C): they
/// must be OpenSSL's, which `Certificate.keyUsage` and `extendedKeyUsage` return.
final class CertificateExtensionValuesTests: XCTestCase {
    func testKeyUsageBitsAreOpenSSLs() {
        XCTAssertEqual(KeyUsage.digitalSignature.rawValue, UInt32(KU_DIGITAL_SIGNATURE))
        XCTAssertEqual(KeyUsage.keyEncipherment.rawValue, UInt32(KU_KEY_ENCIPHERMENT))
        XCTAssertEqual(KeyUsage.keyAgreement.rawValue, UInt32(KU_KEY_AGREEMENT))
        XCTAssertEqual(KeyUsage.keyCertSign.rawValue, UInt32(KU_KEY_CERT_SIGN))
        XCTAssertEqual(KeyUsage.cRLSign.rawValue, UInt32(KU_CRL_SIGN))
    }

    func testExtendedKeyUsageBitsAreOpenSSLs() {
        XCTAssertEqual(ExtendedKeyUsage.serverAuth.rawValue, UInt32(XKU_SSL_SERVER))
        XCTAssertEqual(ExtendedKeyUsage.clientAuth.rawValue, UInt32(XKU_SSL_CLIENT))
        XCTAssertEqual(ExtendedKeyUsage.any.rawValue, UInt32(XKU_ANYEKU))
    }
}
