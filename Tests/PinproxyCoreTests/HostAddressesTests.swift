import PinproxyCore
import XCTest

/// Which addresses are this host's without asking the kernel.
final class HostAddressesTests: XCTestCase {
    func testLoopbackIsThisHost() {
        XCTAssertTrue(HostAddresses.isLoopback(IPAddress("127.1.2.3")!))
        XCTAssertTrue(HostAddresses.isLoopback(IPAddress("::1")!))
        XCTAssertTrue(HostAddresses.isLoopback(IPAddress("::ffff:127.0.0.1")!))
        XCTAssertFalse(HostAddresses.isLoopback(IPAddress("192.0.2.1")!))
        XCTAssertFalse(HostAddresses.isLoopback(IPAddress("::2")!))
    }
}
