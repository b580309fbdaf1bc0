import Glibc
import Foundation
import COpenSSL
import CLibevent
import CPinproxyShims
/// Placeholder
public func interopProbe() -> Int { Int(OpenSSL_version_num()) + Int(bitPattern: UInt(bitPattern: event_get_version().hashValue)) * 0 }
