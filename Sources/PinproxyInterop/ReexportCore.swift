// Interop's API speaks in PinproxyCore's values (addresses, ALPN offers, deadlines): whoever
// imports it sees them too, as swift-nio's `NIO` re-exports `NIOCore`.
@_exported import PinproxyCore
